package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/internal/hostile"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers/stripe/stripefake"
)

// Every 5xx a client can trigger is a defect, and a webhook answered 5xx is
// retried by Stripe for days: a Stripe event signed with the right secret
// (a misbehaving sender, or a leaked secret) whose content is hostile at any
// depth answers a 4xx or a 2xx, never a 5xx; the charge it names ends as
// Stripe's record says, and the audit finds the books whole afterwards.
func TestStripeHostileSignedWebhooksNeverAnswer5xx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	se := newStripeEngine(t)
	e, fake := se.e, se.fake
	ch, err := e.Charges.Create(ctx, charges.ChargeRequest{MerchantID: "m1", Kind: charges.KindCard,
		Amount: money.MustParse("80.00", "BRL"), CardToken: "tok_visa"})
	require.NoError(t, err)
	a := se.hangExec(ch.AttemptID) // unknown, the PaymentIntent at Stripe
	apiSrv, err := api.New(api.Config{Pool: e.Pool, Payouts: e.Payouts, Attempts: e.Attempts, Charges: e.Charges,
		Providers: e.Providers})
	require.NoError(t, err)
	hs := httptest.NewServer(apiSrv)
	t.Cleanup(hs.Close)

	pis := fake.Objects("payment_intent")
	require.Len(t, pis, 1)
	var base map[string]any
	require.NoError(t, json.Unmarshal(fake.Event("payment_intent.succeeded", pis[0]["id"].(string)), &base))
	values := []any{nil, true, 0, -1, 1e308, "", " ", "NaN", "ü€😀", strings.Repeat("a", 5000), []any{}, map[string]any{},
		"a\u0000b", "succeeded", "canceled", "requires_payment_method", "usd", "pi_other", "9999999999999999999"}
	var failures []string
	n := 0
	send := func(what string, body []byte) int {
		n++
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+"/v1/webhooks/stripe", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Stripe-Signature", stripefake.Sign(stripeE2EWebhookSecret, time.Now(), body))
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode >= 500 {
			failures = append(failures, fmt.Sprintf("%.80s: %d %.200s", what, res.StatusCode, b))
		}
		return res.StatusCode
	}
	// The event as Stripe sends it is taken (the sweep is past the
	// signature): it names the unknown attempt's PaymentIntent.
	ok, err := json.Marshal(base)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, send("the event itself", ok))
	refused := 0
	hostile.Each(base, hostile.LeafPaths(base), values, func(f string, v, body any) {
		b, err := json.Marshal(hostile.With(body, []string{"id"}, fmt.Sprintf("evt_hostile%d", n)))
		require.NoError(t, err)
		if send(fmt.Sprintf("%s=%.40v", f, v), b) >= 400 {
			refused++
		}
	})
	for _, raw := range hostile.Malformed {
		send("raw "+raw, []byte(raw))
	}
	require.Empty(t, failures, "%d of %d signed hostile events answered a 5xx", len(failures), n)
	require.Positive(t, refused, "some hostile events are refused")
	require.Less(t, refused, n, "and some pass verification and parsing")

	// Whatever the hostile events said, the attempt ends succeeded, as the
	// genuine event and Stripe's own record (a lookup) say, and the books
	// balance.
	got := se.resolve(a)
	require.Equal(t, attempts.StatusSucceeded, got.Status)
	// Signed events that say the PaymentIntent failed (canceled,
	// requires_payment_method) after it succeeded are a reversal: a
	// divergence in review, nothing moved (R9, R19). The operator settles it.
	require.NotNil(t, got.DivergedAt, "a signed failure after success is a divergence")
	_, err = e.Attempts.SettleDivergence(ctx, a.ID, "op-hostile", "hostile test events, checked against Stripe", attempts.HoldBook)
	require.NoError(t, err)
	res, err := audit.Run(ctx, e.Pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
}

package engine_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
)

// A Pix send notice (right secret) for transfer B naming the endToEndId
// that transfer A already holds is the PSP contradicting itself (R17):
// before writing a provider id, the attempts core checks whether another
// attempt of the provider holds it, and if so B is flagged for review,
// nothing moves, and the webhook is acknowledged (2xx), so every other event
// in the same POST (here: transfer C's genuine REALIZADO) is applied.
// Before, the unique index on the provider id answered 500, the PSP
// redelivered the same POST forever and C's notice was never applied (found
// by review).
func TestPixNoticeNamingAnotherTransfersE2EGoesToReview_R17(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, srv, pool := newPixEngine(t)
	apiSrv, err := api.New(api.Config{Pool: pool, Payouts: e.Payouts, Attempts: e.Attempts, Charges: e.Charges,
		Providers: e.Providers, Logger: slog.New(slog.NewTextHandler(testLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelError}))})
	require.NoError(t, err)
	hs := httptest.NewServer(apiSrv)
	t.Cleanup(hs.Close)
	brl := func(s string) money.Amount { return money.MustParse(s, "BRL") }
	newTransfer := func(amount string) payouts.Payout {
		p, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpPixTransfer,
			Amount: brl(amount), Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "ana@example.com"}}})
		require.NoError(t, err)
		return p
	}

	// A: sent, answered, its endToEndId recorded.
	pa := newTransfer("10.00")
	ra, err := e.Attempts.Execute(ctx, *pa.CurrentAttemptID)
	require.NoError(t, err)
	require.NotEmpty(t, ra.Attempt.ProviderID)
	e2eA := ra.Attempt.ProviderID

	// B: committed by the PSP, the answer lost: unknown, no provider id.
	pb := newTransfer("10.00")
	srv.HangAfterCommit(1)
	rb, err := e.Attempts.Execute(ctx, *pb.CurrentAttemptID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusUnknown, rb.Attempt.Status)
	require.Empty(t, rb.Attempt.ProviderID)

	// C: sent, answered, settled at the PSP.
	pc := newTransfer("5.00")
	rc, err := e.Attempts.Execute(ctx, *pc.CurrentAttemptID)
	require.NoError(t, err)
	require.NoError(t, srv.SettleSend(rc.Attempt.Reference, true))

	now := time.Now().UTC().Format(time.RFC3339Nano)
	notice := func(e2e, id, valor string) string {
		return `{"endToEndId":"` + e2e + `","valor":"` + valor + `","horario":"` + now + `","status":"REALIZADO",` +
			`"tipo":"SOLICITACAO","chave":"` + pixKey + `","gnExtras":{"idEnvio":"` + id + `"}}`
	}
	body := `{"pix":[` + notice(e2eA, rb.Attempt.Reference, "10.00") + `,` +
		notice(rc.Attempt.ProviderID, rc.Attempt.Reference, "5.00") + `]}`
	var codes []int
	for i := 0; i < 3; i++ { // the PSP redelivers what was not acknowledged
		r, err := http.Post(hs.URL+"/v1/webhooks/pix?hmac=w3bh00k&ignorar=/pix", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		codes = append(codes, r.StatusCode)
		t.Logf("delivery %d: %d %s", i+1, r.StatusCode, b)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
	}

	gb, err := e.Attempts.Get(ctx, pool, rb.Attempt.ID)
	require.NoError(t, err)
	gc, err := e.Attempts.Get(ctx, pool, rc.Attempt.ID)
	require.NoError(t, err)
	t.Logf("B: status %s review %v provider_id %q; C: status %s", gb.Status, gb.Review, gb.ProviderID, gc.Status)
	for _, c := range codes {
		require.Less(t, c, 500, "a notice naming another transfer's endToEndId is acknowledged below 5xx, not redelivered forever")
	}
	require.True(t, gb.Review, "B is flagged for review: the PSP named another transfer's endToEndId")
	require.Equal(t, attempts.StatusSucceeded, gc.Status, "C's genuine notice in the same POST is applied")
}

// testLogWriter sends a logger's lines to the test log.
type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// The resolver's lookup of an unknown transfer B answers 200 REALIZADO with
// the endToEndId transfer A already holds (a PSP mixing up two sends). The
// report contradicts the books (R17): the attempts core sees that another
// attempt holds that provider id, flags B for review with nothing moved, and
// records the lookup (R18), with no error on any try. Before, every Resolve
// failed on the unique index attempts_provider_id, the lookup was never
// recorded, and B stayed unknown, out of review, its reserve held with
// nobody told (found by review).
func TestPixLookupNamingAnotherTransfersE2EGoesToReview_R17_R18(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, srv, pool := newPixEngine(t)
	brl := func(s string) money.Amount { return money.MustParse(s, "BRL") }
	newTransfer := func(amount string) payouts.Payout {
		p, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpPixTransfer,
			Amount: brl(amount), Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "ana@example.com"}}})
		require.NoError(t, err)
		return p
	}
	pa := newTransfer("10.00")
	ra, err := e.Attempts.Execute(ctx, *pa.CurrentAttemptID)
	require.NoError(t, err)
	e2eA := ra.Attempt.ProviderID
	require.NotEmpty(t, e2eA)

	pb := newTransfer("10.00")
	srv.HangAfterCommit(1)
	rb, err := e.Attempts.Execute(ctx, *pb.CurrentAttemptID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusUnknown, rb.Attempt.Status)
	b := rb.Attempt

	now := time.Now().UTC().Format(time.RFC3339Nano)
	answer := `{"endToEndId":"` + e2eA + `","idEnvio":"` + b.Reference + `","valor":"10.00","chave":"` + pixKey +
		`","status":"REALIZADO","horario":{"solicitacao":"` + now + `","liquidacao":"` + now + `"}}`
	var errs []error
	for i := 0; i < 5; i++ {
		srv.FailNext(http.StatusOK, answer)
		time.Sleep(2 * time.Millisecond) // the resolve schedule is 1 ms
		_, err := e.Attempts.Resolve(ctx, b.ID)
		if err != nil {
			errs = append(errs, err)
		}
	}
	got, err := e.Attempts.Get(ctx, pool, b.ID)
	require.NoError(t, err)
	t.Logf("B after 5 lookups: status %s review %v lookups %d; errors %d, first: %v", got.Status, got.Review, got.LookupCount, len(errs),
		func() error {
			if len(errs) > 0 {
				return errs[0]
			}
			return nil
		}())
	require.Positive(t, got.LookupCount, "the lookups that named A's endToEndId are recorded")
	require.Empty(t, errs, "a lookup naming another transfer's endToEndId is a contradiction for review, not an error on every try")
	require.True(t, got.Review || got.Status.Final(), "B is in front of a human")
}

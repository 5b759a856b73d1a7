package stripe_test

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/stripe"
	"github.com/saldo/saldo/providers/stripe/stripefake"
)

// TestWebhookSecondTimestampDoesNotReplayStaleEvent_R17 shows R17's
// timestamp check (a webhook moves money only when verified and fresh):
// stripe-go's parseSignatureHeader keeps the LAST t= of Stripe-Signature
// (and skips a " t=" with a leading space). A captured delivery signed an
// hour ago, replayed with a fresh t= put in front, passes the HMAC on the
// old timestamp; the tolerance must be checked on that same timestamp, or
// the header refused, never on the fresh one.
func TestWebhookSecondTimestampDoesNotReplayStaleEvent_R17(t *testing.T) {
	_, p := newFake(t)
	const secret = "whsec_test_secret"
	now := time.Now()
	old := now.Add(-time.Hour)
	body := []byte(fmt.Sprintf(`{"id":"evt_replayed","object":"event","type":"payment_intent.succeeded","api_version":"2026-03-25.dahlia","created":%d,`+
		`"data":{"object":{"id":"pi_1","object":"payment_intent","amount":2500,"currency":"usd","status":"succeeded",`+
		`"metadata":{"saldo_reference":"%s"}}}}`, old.Unix(), ref()))
	captured := stripefake.Sign(secret, old, body) // "t=<old>,v1=<sig>", as Stripe sent it an hour ago

	// Sanity: the captured delivery as is, an hour later, is stale.
	h := http.Header{}
	h.Set(stripe.SignatureHeader, captured)
	if _, err := p.ParseWebhook(h, body, now); !errors.Is(err, providers.ErrStaleWebhook) {
		t.Fatalf("captured delivery an hour later: %v, want ErrStaleWebhook", err)
	}

	for name, forged := range map[string]string{
		"fresh t= first":        fmt.Sprintf("t=%d,%s", now.Unix(), captured),
		"fresh t= with a space": fmt.Sprintf(" t=%d,%s", now.Unix(), captured),
	} {
		h := http.Header{}
		h.Set(stripe.SignatureHeader, forged)
		ev, err := p.ParseWebhook(h, body, now)
		if err == nil {
			t.Errorf("%s: a delivery signed %s ago was accepted as fresh (event %s %s %s)", name, now.Sub(old), ev.ID, ev.Type, ev.State)
		} else if !errors.Is(err, providers.ErrStaleWebhook) && !errors.Is(err, providers.ErrBadSignature) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

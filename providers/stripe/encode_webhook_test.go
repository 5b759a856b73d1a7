package stripe_test

import (
	"bytes"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/stripe"
	"github.com/saldo/saldo/providers/stripe/stripefake"
)

// TestEncodePayloadMinorUnitsAndRefusals_R5: amounts in Stripe's minor
// units by currency; what Stripe would refuse is refused before anything is
// stored or sent; the bytes are a pure function of the input.
func TestEncodePayloadMinorUnitsAndRefusals_R5(t *testing.T) {
	p := newProvider(t, "http://127.0.0.1:1")
	r := ref()
	ok := []struct {
		in     providers.OperationInput
		amount string
	}{
		{charge("10.50", "USD", "pm_card_visa"), "1050"},
		{charge("10.5", "USD", "pm_card_visa"), "1050"},
		{charge("500", "JPY", "pm_card_visa"), "500"},
		{charge("1500", "CLP", "pm_card_visa"), "1500"},
		{charge("5.12", "KWD", "pm_card_visa"), "5120"},
		{charge("5.120", "BHD", "pm_card_visa"), "5120"},
		{charge("5", "ISK", "pm_card_visa"), "500"},
		{charge("10.50", "HUF", "pm_card_visa"), "1050"},
		{payout("10", "HUF"), "1000"},
		{charge("999999.99", "USD", "pm_card_visa"), "99999999"},
		{refund("pi_123", "0.01", "BRL"), "1"},
		{transfer("acct_1ABC", "7.25", "EUR"), "725"},
	}
	for _, c := range ok {
		b, err := p.EncodePayload(c.in, r)
		if err != nil {
			t.Errorf("%s %s %s: %v", c.in.Operation, c.in.Amount, c.in.Currency, err)
			continue
		}
		v, _ := url.ParseQuery(string(b))
		if v.Get("amount") != c.amount {
			t.Errorf("%s %s: amount=%s, want %s", c.in.Amount, c.in.Currency, v.Get("amount"), c.amount)
		}
		if v.Get("metadata[saldo_reference]") != r {
			t.Errorf("no reference in %s", b)
		}
		if c.in.Operation != providers.OpRefund && v.Get("currency") != strings.ToLower(c.in.Currency) {
			t.Errorf("currency %q", v.Get("currency"))
		}
		again, _ := p.EncodePayload(c.in, r)
		if !bytes.Equal(b, again) {
			t.Errorf("not deterministic: %s vs %s", b, again)
		}
	}
	// The card charge's fields.
	b, _ := p.EncodePayload(charge("10.50", "USD", "pm_card_visa"), r)
	v, _ := url.ParseQuery(string(b))
	for k, want := range map[string]string{"confirm": "true", "payment_method": "pm_card_visa", "capture_method": "automatic",
		"payment_method_types[0]": "card", "error_on_requires_action": "true", "description": "order 42",
		"metadata[saldo_charge_id]": "c1"} {
		if v.Get(k) != want {
			t.Errorf("%s = %q, want %q (%s)", k, v.Get(k), want, b)
		}
	}
	b, _ = p.EncodePayload(transfer("acct_1ABC", "1.00", "USD"), r)
	if v, _ := url.ParseQuery(string(b)); v.Get("transfer_group") != r || v.Get("destination") != "acct_1ABC" {
		t.Errorf("transfer: %s", b)
	}
	b, _ = p.EncodePayload(payout("1.00", "USD"), r)
	if v, _ := url.ParseQuery(string(b)); v.Get("destination") != payoutBankAccount || v.Get("amount") != "100" {
		t.Errorf("payout: %s", b)
	}
	b, _ = p.EncodePayload(refund("pi_123", "1.00", "USD"), r)
	if v, _ := url.ParseQuery(string(b)); v.Get("payment_intent") != "pi_123" || v.Has("currency") {
		t.Errorf("refund: %s", b)
	}

	bad := []struct {
		name string
		in   providers.OperationInput
		err  error
	}{
		{"USD with three decimals", charge("10.505", "USD", "pm_card_visa"), providers.ErrInvalidInput},
		{"JPY with decimals", charge("500.5", "JPY", "pm_card_visa"), providers.ErrInvalidInput},
		{"KWD last digit not 0", charge("5.124", "KWD", "pm_card_visa"), providers.ErrInvalidInput},
		{"fractional ISK", charge("5.50", "ISK", "pm_card_visa"), providers.ErrInvalidInput},
		{"fractional HUF payout", payout("10.50", "HUF"), providers.ErrInvalidInput},
		{"charge over eight digits", charge("1000000.00", "USD", "pm_card_visa"), providers.ErrInvalidInput},
		{"zero", charge("0", "USD", "pm_card_visa"), providers.ErrInvalidInput},
		{"negative", charge("-1.00", "USD", "pm_card_visa"), providers.ErrInvalidInput},
		{"lower-case currency", charge("1.00", "usd", "pm_card_visa"), providers.ErrInvalidInput},
		{"card number as token", charge("1.00", "USD", "4242424242424242"), providers.ErrInvalidInput},
		{"refund of a non-PaymentIntent", refund("ch_123", "1.00", "USD"), providers.ErrInvalidInput},
		{"transfer without account", transfer("", "1.00", "USD"), providers.ErrInvalidInput},
		{"transfer to a bank account", providers.OperationInput{Operation: providers.OpAccountTransfer, Amount: "1.00", Currency: "USD",
			Destination: &providers.Destination{BankAccount: &providers.BankAccount{ISPB: "12345678", Branch: "1", Account: "12", Type: "checking"}}},
			providers.ErrInvalidInput},
		{"payout to a Pix key", providers.OperationInput{Operation: providers.OpBankPayout, Amount: "1.00", Currency: "BRL",
			Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "a@b.co"}}}, providers.ErrInvalidInput},
		{"payout without a destination", providers.OperationInput{Operation: providers.OpBankPayout, Amount: "1.00", Currency: "BRL"},
			providers.ErrInvalidInput},
		{"payout to a Brazilian bank account", providers.OperationInput{Operation: providers.OpBankPayout, Amount: "1.00", Currency: "BRL",
			Destination: &providers.Destination{BankAccount: &providers.BankAccount{ISPB: "12345678", Branch: "1", Account: "12", Type: "checking"}}},
			providers.ErrInvalidInput},
		{"payout to a connected account", providers.OperationInput{Operation: providers.OpBankPayout, Amount: "1.00", Currency: "BRL",
			Destination: &providers.Destination{StripeAccount: "acct_1ABC"}}, providers.ErrInvalidInput},
		{"payout to a card id", providers.OperationInput{Operation: providers.OpBankPayout, Amount: "1.00", Currency: "BRL",
			Destination: &providers.Destination{StripeBankAccount: "card_1ABC"}}, providers.ErrInvalidInput},
		{"payout to a bank account and a connected account", providers.OperationInput{Operation: providers.OpBankPayout, Amount: "1.00",
			Currency: "BRL", Destination: &providers.Destination{StripeBankAccount: "ba_1ABC", StripeAccount: "acct_1ABC"}},
			providers.ErrInvalidInput},
		{"transfer to a Stripe bank account", providers.OperationInput{Operation: providers.OpAccountTransfer, Amount: "1.00", Currency: "USD",
			Destination: &providers.Destination{StripeBankAccount: "ba_1ABC"}}, providers.ErrInvalidInput},
		{"saldo_reference in metadata", providers.OperationInput{Operation: providers.OpBankPayout, Amount: "1.00", Currency: "BRL",
			Destination: &providers.Destination{StripeBankAccount: "ba_1ABC"}, Metadata: map[string]string{"saldo_reference": "x"}},
			providers.ErrInvalidInput},
		{"metadata key with brackets", providers.OperationInput{Operation: providers.OpBankPayout, Amount: "1.00", Currency: "BRL",
			Destination: &providers.Destination{StripeBankAccount: "ba_1ABC"}, Metadata: map[string]string{"a[b]": "x"}},
			providers.ErrInvalidInput},
		{"pix transfer", providers.OperationInput{Operation: providers.OpPixTransfer, Amount: "1.00", Currency: "BRL"}, providers.ErrUnsupported},
		{"pix charge", providers.OperationInput{Operation: providers.OpPixCharge, Amount: "1.00", Currency: "BRL"}, providers.ErrUnsupported},
	}
	for _, c := range bad {
		if _, err := p.EncodePayload(c.in, r); !errors.Is(err, c.err) {
			t.Errorf("%s: %v, want %v", c.name, err, c.err)
		}
	}
}

// TestEncodeRefusalSendsNothing_R4: a refused input never reaches Stripe
// (EncodePayload makes no I/O; the attempt is never opened).
func TestEncodeRefusalSendsNothing_R4(t *testing.T) {
	f, p := newFake(t)
	if _, err := p.EncodePayload(charge("5.124", "KWD", "pm_card_visa"), ref()); err == nil {
		t.Fatal("accepted")
	}
	if n := f.Requests("POST /v1/payment_intents"); n != 0 {
		t.Fatalf("%d requests", n)
	}
}

func signed(t *testing.T, p *stripe.Provider, body []byte, at time.Time, secret string) (providers.WebhookEvent, error) {
	t.Helper()
	return signedNow(t, p, body, at, time.Now(), secret)
}

// signedNow is signed with the receiver's clock fixed: the tolerance's
// edges are checked against the instant they were computed from, however
// long the test took to get there.
func signedNow(t *testing.T, p *stripe.Provider, body []byte, at, now time.Time, secret string) (providers.WebhookEvent, error) {
	t.Helper()
	h := http.Header{}
	h.Set(stripe.SignatureHeader, stripefake.Sign(secret, at, body))
	return p.ParseWebhook(h, body, now)
}

// TestWebhooks_R17: good, forged, stale (past and future), duplicated,
// every mapped type with its amount and currency, and events that are not
// saldo's.
func TestWebhooks_R17(t *testing.T) {
	f, p := newFake(t)
	const secret = "whsec_test_secret"
	now := time.Now()
	rc := ref()
	pi := submit(t, p, charge("25.00", "USD", stripefake.PMVisa), rc, key())
	rd := ref()
	declined := submit(t, p, charge("3.00", "USD", stripefake.PMDeclined), rd, key())
	rr := ref()
	re := submit(t, p, refund(pi.ProviderID, "5.00", "USD"), rr, key())
	rt := ref()
	tr := submit(t, p, transfer("acct_1ABC", "500", "JPY"), rt, key())
	rp := ref()
	po := submit(t, p, payout("30.00", "EUR"), rp, key())

	good := f.Event("payment_intent.succeeded", pi.ProviderID)
	ev, err := signed(t, p, good, now, secret)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Operation != providers.OpCardCharge || ev.Reference != rc || ev.State != providers.StateSucceeded ||
		ev.Amount != "25.00" || ev.Currency != "USD" || ev.ProviderID != pi.ProviderID || !strings.HasPrefix(ev.ID, "evt_") {
		t.Fatalf("payment_intent.succeeded: %+v", ev)
	}
	// Duplicated: the same delivery twice parses to the same event id (the
	// API deduplicates by it).
	if ev2, err := signed(t, p, good, now.Add(time.Second), secret); err != nil || ev2.ID != ev.ID {
		t.Fatalf("duplicate: %+v %v", ev2, err)
	}
	// Forged: another secret, a tampered body, no header.
	if _, err := signed(t, p, good, now, "whsec_attacker"); !errors.Is(err, providers.ErrBadSignature) {
		t.Errorf("forged: %v", err)
	}
	h := http.Header{}
	h.Set(stripe.SignatureHeader, stripefake.Sign(secret, now, good))
	tampered := bytes.Replace(good, []byte(`"amount":2500`), []byte(`"amount":9500`), 1)
	if _, err := p.ParseWebhook(h, tampered, now); !errors.Is(err, providers.ErrBadSignature) {
		t.Errorf("tampered: %v", err)
	}
	if _, err := p.ParseWebhook(http.Header{}, good, now); !errors.Is(err, providers.ErrBadSignature) {
		t.Errorf("unsigned: %v", err)
	}
	// Stale: outside 300 s either way; inside is fine.
	if _, err := signedNow(t, p, good, now.Add(-301*time.Second), now, secret); !errors.Is(err, providers.ErrStaleWebhook) {
		t.Errorf("stale: %v", err)
	}
	if _, err := signedNow(t, p, good, now.Add(301*time.Second), now, secret); !errors.Is(err, providers.ErrStaleWebhook) {
		t.Errorf("from the future: %v", err)
	}
	if _, err := signedNow(t, p, good, now.Add(-299*time.Second), now, secret); err != nil {
		t.Errorf("within tolerance: %v", err)
	}
	// A forged and stale event is forged first.
	if _, err := signed(t, p, good, now.Add(-time.Hour), "whsec_attacker"); !errors.Is(err, providers.ErrBadSignature) {
		t.Errorf("forged and stale: %v", err)
	}
	noSecret := newProvider(t, f.URL(), func(c *stripe.Config) { c.WebhookSecret = "" })
	if _, err := signed(t, noSecret, good, now, secret); !errors.Is(err, providers.ErrBadSignature) {
		t.Errorf("no secret configured: %v", err)
	}
	if _, err := signed(t, p, []byte(`{"id":"evt_1","object":"event"`), now, secret); !errors.Is(err, providers.ErrMalformedWebhook) {
		t.Errorf("malformed: %v", err)
	}

	f.SetStatus(po.ProviderID, "paid", "")
	failedPayout := submit(t, p, payout("31.00", "EUR"), ref(), key())
	f.SetStatus(failedPayout.ProviderID, "failed", "account_closed")
	f.Reverse(tr.ProviderID)
	mapped := []struct {
		typ, id string
		op      providers.Operation
		ref     string
		state   providers.State
		amount  string
		cur     string
		code    string
	}{
		{"payment_intent.payment_failed", declined.ProviderID, providers.OpCardCharge, rd, providers.StateFailed, "3.00", "USD", "generic_decline"},
		{"refund.updated", re.ProviderID, providers.OpRefund, rr, providers.StateSucceeded, "5.00", "USD", ""},
		{"charge.refund.updated", re.ProviderID, providers.OpRefund, rr, providers.StateSucceeded, "5.00", "USD", ""},
		{"transfer.reversed", tr.ProviderID, providers.OpAccountTransfer, rt, providers.StateFailed, "500", "JPY", "transfer_reversed"},
		{"payout.paid", po.ProviderID, providers.OpBankPayout, rp, providers.StateSucceeded, "30.00", "EUR", ""},
		{"payout.failed", failedPayout.ProviderID, providers.OpBankPayout, "", providers.StateFailed, "31.00", "EUR", "account_closed"},
	}
	for _, m := range mapped {
		ev, err := signed(t, p, f.Event(m.typ, m.id), now, secret)
		if err != nil {
			t.Fatalf("%s: %v", m.typ, err)
		}
		if ev.Operation != m.op || (m.ref != "" && ev.Reference != m.ref) || ev.State != m.state || ev.Amount != m.amount ||
			ev.Currency != m.cur || ev.FailureCode != m.code || ev.Type != m.typ {
			t.Errorf("%s: %+v", m.typ, ev)
		}
	}
	f.SetStatus(re.ProviderID, "failed", "expired_or_canceled_card")
	if ev, _ := signed(t, p, f.Event("refund.failed", re.ProviderID), now, secret); ev.State != providers.StateFailed ||
		ev.FailureCode != "expired_or_canceled_card" {
		t.Errorf("refund.failed: %+v", ev)
	}

	// Not saldo's: an object without our reference, charge.refunded (names
	// the charge, whose metadata is the card charge's), an unknown type.
	foreign := f.Seed("payment_intent", 100, "usd", "", now)
	notOurs := []struct{ typ, id string }{
		{"payment_intent.succeeded", foreign["id"].(string)},
		{"charge.refunded", pi.ProviderID},
		{"customer.created", pi.ProviderID},
	}
	for _, n := range notOurs {
		ev, err := signed(t, p, f.Event(n.typ, n.id), now, secret)
		if err != nil {
			t.Fatalf("%s: %v", n.typ, err)
		}
		if ev.Reference == rc || ev.Reference == "" || ev.State != providers.StateProcessing {
			t.Errorf("%s should match no attempt: %+v", n.typ, ev)
		}
	}
}

// TestWebhookAmountsAreMajorUnits: the webhook and lookup amounts are what
// the attempts core compares with the attempt (decimal, major units).
func TestWebhookAmountsAreMajorUnits(t *testing.T) {
	f, p := newFake(t)
	r := ref()
	res := submit(t, p, charge("5.12", "KWD", stripefake.PMVisa), r, key())
	mustOutcome(t, res, attempts.OutcomeSucceeded)
	ev, err := signed(t, p, f.Event("payment_intent.succeeded", res.ProviderID), time.Now(), "whsec_test_secret")
	if err != nil || ev.Amount != "5.120" || ev.Currency != "KWD" {
		t.Fatalf("%+v %v", ev, err)
	}
}

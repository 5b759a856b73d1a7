package stripe_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/stripe"
	"github.com/saldo/saldo/providers/stripe/stripefake"
)

func mustOutcome(t *testing.T, res providers.SubmitResult, want attempts.Outcome) {
	t.Helper()
	if got := attempts.Classify(res); got != want {
		t.Fatalf("Classify = %s, want %s (status %d, refinement %q, state %q, code %q, err %v, body %s)", got, want,
			res.Exchange.StatusCode, res.Refinement, res.State, res.FailureCode, res.Exchange.Err, res.Exchange.Body)
	}
}

// TestClassifyEveryStripeAnswer_R1_R2 runs attempts.Classify on the
// adapter's SubmitResult for every answer the Stripe fake gives, over real
// HTTP: every outcome the classifier knows is reached.
func TestClassifyEveryStripeAnswer_R1_R2(t *testing.T) {
	reached := map[attempts.Outcome]bool{}
	cases := []struct {
		name   string
		fault  *stripefake.Fault
		in     providers.OperationInput
		want   attempts.Outcome
		code   string
		refine providers.Refinement
	}{
		{name: "card charge succeeded", in: charge("10.50", "USD", stripefake.PMVisa), want: attempts.OutcomeSucceeded},
		{name: "card charge processing", in: charge("10.50", "USD", stripefake.PMProcessing), want: attempts.OutcomeProcessing},
		{name: "402 card_declined", in: charge("10.50", "USD", stripefake.PMDeclined), want: attempts.OutcomeFailed,
			code: "generic_decline", refine: providers.RefineDeclined},
		{name: "402 insufficient_funds", in: charge("10.50", "USD", stripefake.PMInsufficient), want: attempts.OutcomeFailed,
			code: "insufficient_funds", refine: providers.RefineDeclined},
		{name: "400 resource_missing refund", in: refund("pi_missing", "1.00", "USD"), want: attempts.OutcomeFailed, code: "resource_missing"},
		{name: "400 balance_insufficient transfer", in: transfer("acct_1ABC", "9999999999.00", "USD"), want: attempts.OutcomeFailed,
			code: "balance_insufficient"},
		{name: "transfer succeeded", in: transfer("acct_1ABC", "7.25", "USD"), want: attempts.OutcomeSucceeded},
		{name: "payout pending is processing", in: payout("100.00", "USD"), want: attempts.OutcomeProcessing},
		{name: "429 with Retry-After", fault: &stripefake.Fault{Kind: stripefake.FaultRateLimit, RetryAfter: 7},
			in: charge("1.00", "USD", stripefake.PMVisa), want: attempts.OutcomeRateLimited, refine: providers.RefineRateLimited},
		{name: "403 permission", fault: &stripefake.Fault{Kind: stripefake.FaultForbidden},
			in: payout("1.00", "USD"), want: attempts.OutcomeAuthRefused, refine: providers.RefineAuthRefused},
		{name: "400 with Stripe-Should-Retry true", fault: &stripefake.Fault{Kind: stripefake.FaultShouldRetry400},
			in: payout("1.00", "USD"), want: attempts.OutcomeRateLimited, refine: providers.RefineRateLimited},
		{name: "500 api_error", fault: &stripefake.Fault{Kind: stripefake.FaultServerError},
			in: charge("1.00", "USD", stripefake.PMVisa), want: attempts.OutcomeUnknown, code: "api_error"},
		{name: "cut after write", fault: &stripefake.Fault{Kind: stripefake.FaultCutAfterWrite},
			in: transfer("acct_1ABC", "1.00", "USD"), want: attempts.OutcomeUnknown},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, p := newFake(t)
			if c.fault != nil {
				f.Script(*c.fault)
			}
			res := submit(t, p, c.in, ref(), key())
			mustOutcome(t, res, c.want)
			reached[c.want] = true
			if c.code != "" && res.FailureCode != c.code {
				t.Errorf("FailureCode = %q, want %q", res.FailureCode, c.code)
			}
			if res.Refinement != c.refine {
				t.Errorf("Refinement = %q, want %q", res.Refinement, c.refine)
			}
			if c.fault != nil && c.fault.Kind == stripefake.FaultRateLimit && res.Exchange.RetryAfter != 7*time.Second {
				t.Errorf("RetryAfter = %s, want 7s", res.Exchange.RetryAfter)
			}
			if c.want == attempts.OutcomeSucceeded && res.ProviderID == "" {
				t.Error("no provider id")
			}
		})
	}
	t.Run("401 wrong key", func(t *testing.T) {
		f, _ := newFake(t)
		log, buf := logBuffer()
		p := newProvider(t, f.URL(), func(c *stripe.Config) { c.APIKey = "sk_test_revokedKey123"; c.Logger = log })
		res := submit(t, p, charge("1.00", "USD", stripefake.PMVisa), ref(), key())
		mustOutcome(t, res, attempts.OutcomeAuthRefused)
		if res.Refinement != providers.RefineAuthRefused {
			t.Errorf("Refinement = %q, want %q", res.Refinement, providers.RefineAuthRefused)
		}
		if strings.Contains(buf.String(), "sk_test_revokedKey123") || strings.Contains(res.FailureReason, "sk_test_revokedKey123") {
			t.Errorf("the key leaked: %s %s", buf.String(), res.FailureReason)
		}
		if !strings.Contains(buf.String(), "level=ERROR") || !strings.Contains(buf.String(), "status=401") {
			t.Errorf("no alert logged: %s", buf.String())
		}
		if n := len(f.Objects("payment_intent")); n != 0 {
			t.Errorf("%d objects created by a refused request", n)
		}
		reached[attempts.OutcomeAuthRefused] = true
		// A lookup with that key is refused too: inconclusive (not found
		// would be a lie), alerted, the key nowhere.
		buf.Reset()
		lr, err := p.Lookup(context.Background(), providers.OpBankPayout, ref())
		if err != nil || lr.Found || lr.Exchange.StatusCode != http.StatusUnauthorized {
			t.Errorf("lookup with a wrong key: %+v %v", lr, err)
		}
		if !strings.Contains(buf.String(), "level=ERROR") || !strings.Contains(buf.String(), "lookup refused") ||
			strings.Contains(buf.String(), "sk_test_revokedKey123") {
			t.Errorf("lookup refusal not alerted, or the key leaked: %s", buf.String())
		}
	})
	t.Run("400 idempotency_error: key misuse", func(t *testing.T) {
		_, p := newFake(t)
		k, r := key(), ref()
		mustOutcome(t, submit(t, p, charge("1.00", "USD", stripefake.PMVisa), r, k), attempts.OutcomeSucceeded)
		res := submit(t, p, charge("2.00", "USD", stripefake.PMVisa), r, k)
		mustOutcome(t, res, attempts.OutcomeKeyMisuse)
		if res.Exchange.StatusCode != http.StatusBadRequest || res.Refinement != providers.RefineKeyMisuse {
			t.Fatalf("got %d %q", res.Exchange.StatusCode, res.Refinement)
		}
		reached[attempts.OutcomeKeyMisuse] = true
	})
	t.Run("409 idempotency_key_in_use while the first runs", func(t *testing.T) {
		f, p := newFake(t)
		// The first holds its key for 2 s (within the 5 s read timeout); the
		// second goes once the fake has the first in flight. A fixed 200 ms
		// head start inside a 700 ms hold missed either end on a loaded
		// machine.
		f.Script(stripefake.Fault{Kind: stripefake.FaultSlow, Delay: 2 * time.Second})
		k, r := key(), ref()
		in := payout("3.00", "USD")
		var first providers.SubmitResult
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); first = submit(t, p, in, r, k) }()
		for deadline := time.Now().Add(10 * time.Second); len(f.KeysSeen()) == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the first request never reached the fake")
			}
		}
		second := submit(t, p, in, r, k)
		wg.Wait()
		mustOutcome(t, second, attempts.OutcomeInFlight)
		if second.Refinement != providers.RefineInFlight || second.FailureCode != "idempotency_key_in_use" {
			t.Errorf("second: %q %q", second.Refinement, second.FailureCode)
		}
		mustOutcome(t, first, attempts.OutcomeProcessing)
		if n := len(f.Objects("payout")); n != 1 {
			t.Fatalf("%d payouts, want 1", n)
		}
		reached[attempts.OutcomeInFlight] = true
	})
	t.Run("connection refused: not sent", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		p := newProvider(t, "http://"+addr)
		res := submit(t, p, charge("1.00", "USD", stripefake.PMVisa), ref(), key())
		mustOutcome(t, res, attempts.OutcomeNotSent)
		reached[attempts.OutcomeNotSent] = true
	})
	for _, o := range attempts.Outcomes {
		if !reached[o] {
			t.Errorf("outcome %s never reached", o)
		}
	}
}

// TestIdempotentReplayReadLikeFirst_R14: the same key and bytes replay the
// first answer (Idempotent-Replayed: true), read exactly like it, and
// Stripe holds one object: a 200, a 402 and a 500 alike.
func TestIdempotentReplayReadLikeFirst_R14(t *testing.T) {
	for _, c := range []struct {
		name  string
		in    providers.OperationInput
		fault *stripefake.Fault
		want  attempts.Outcome
		objs  int
	}{
		{"200 succeeded", charge("10.00", "EUR", stripefake.PMVisa), nil, attempts.OutcomeSucceeded, 1},
		{"402 declined", charge("10.00", "EUR", stripefake.PMDeclined), nil, attempts.OutcomeFailed, 1},
		{"500 stored and replayed", charge("10.00", "EUR", stripefake.PMVisa), &stripefake.Fault{Kind: stripefake.FaultServerError},
			attempts.OutcomeUnknown, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, p := newFake(t)
			if c.fault != nil {
				f.Script(*c.fault)
			}
			k, r := key(), ref()
			first := submit(t, p, c.in, r, k)
			again := submit(t, p, c.in, r, k)
			mustOutcome(t, first, c.want)
			mustOutcome(t, again, c.want)
			if first.Exchange.Header.Get(stripe.ReplayedHeader) != "" || again.Exchange.Header.Get(stripe.ReplayedHeader) != "true" {
				t.Errorf("Idempotent-Replayed: first %q, again %q", first.Exchange.Header.Get(stripe.ReplayedHeader),
					again.Exchange.Header.Get(stripe.ReplayedHeader))
			}
			if first.ProviderID != again.ProviderID || first.FailureCode != again.FailureCode || first.State != again.State {
				t.Errorf("replay read differently: %+v vs %+v", first, again)
			}
			if n := len(f.Objects("payment_intent")); n != c.objs {
				t.Errorf("%d PaymentIntents, want %d", n, c.objs)
			}
		})
	}
}

// TestKeyExpiresAfter24Hours_R14: past 24 hours Stripe forgets the key and
// the same request makes a second PaymentIntent. That is why the adapter
// declares KeyLifetime 24h and saldo never re-sends past it.
func TestKeyExpiresAfter24Hours_R14(t *testing.T) {
	f, p := newFake(t, stripefake.WithFakeClock(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)))
	if p.Capabilities().KeyLifetime != 24*time.Hour || !p.Capabilities().IdempotencyKeys {
		t.Fatalf("capabilities %+v", p.Capabilities())
	}
	k, r := key(), ref()
	in := charge("10.00", "USD", stripefake.PMVisa)
	first := submit(t, p, in, r, k)
	f.Advance(23 * time.Hour)
	if again := submit(t, p, in, r, k); again.ProviderID != first.ProviderID {
		t.Fatalf("within 24h: %s then %s", first.ProviderID, again.ProviderID)
	}
	f.Advance(2 * time.Hour)
	late := submit(t, p, in, r, k)
	if late.ProviderID == first.ProviderID || len(f.Objects("payment_intent")) != 2 {
		t.Fatalf("after 25h the key should be gone: %s then %s, %d objects", first.ProviderID, late.ProviderID,
			len(f.Objects("payment_intent")))
	}
}

// TestSearchLagNotFoundIsNoProof_R16: a PaymentIntent is invisible to Search
// for a while after it is made; the lookup answers a clean "not found"
// (which the attempts core accepts only after the consistency window, an
// hour here, longer than the lag) and then finds it.
func TestSearchLagNotFoundIsNoProof_R16(t *testing.T) {
	f, p := newFake(t, stripefake.WithSearchLag(90*time.Second), stripefake.WithFakeClock(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)))
	r := ref()
	mustOutcome(t, submit(t, p, charge("10.00", "USD", stripefake.PMVisa), r, key()), attempts.OutcomeSucceeded)
	lr, err := p.Lookup(context.Background(), providers.OpCardCharge, r)
	if err != nil || lr.Found || lr.Exchange.Err != nil || lr.Exchange.StatusCode != http.StatusOK {
		t.Fatalf("during the lag: %+v %v", lr, err)
	}
	if w := p.Capabilities().ConsistencyWindow; w < time.Hour {
		t.Fatalf("consistency window %s shorter than Stripe's documented search lag", w)
	}
	f.Advance(2 * time.Minute)
	lr, _ = p.Lookup(context.Background(), providers.OpCardCharge, r)
	if !lr.Found || lr.State != providers.StateSucceeded || lr.Amount != "10.00" || lr.Currency != "USD" {
		t.Fatalf("after the lag: %+v", lr)
	}
}

// TestCutAndHangAfterWriteResolvedByLookup_R2_R3_R14: the operation is
// recorded at Stripe and the answer never arrives (a cut connection, a hang
// past the read timeout): unknown, and one lookup finds the one object.
func TestCutAndHangAfterWriteResolvedByLookup_R2_R3_R14(t *testing.T) {
	for _, kind := range []stripefake.FaultKind{stripefake.FaultCutAfterWrite, stripefake.FaultHangAfterCommit} {
		for _, in := range []providers.OperationInput{charge("12.34", "USD", stripefake.PMVisa),
			transfer("acct_1XYZ", "5.00", "USD"), payout("8.00", "USD")} {
			t.Run(string(kind)+"/"+string(in.Operation), func(t *testing.T) {
				f := stripefake.New(testKey)
				t.Cleanup(f.Close)
				p := newProvider(t, f.URL(), func(c *stripe.Config) { c.HTTP.ReadTimeout = 300 * time.Millisecond })
				f.Script(stripefake.Fault{Kind: kind, Delay: 5 * time.Second})
				r := ref()
				res := submit(t, p, in, r, key())
				mustOutcome(t, res, attempts.OutcomeUnknown)
				if !res.Exchange.Wrote {
					t.Fatal("request not reported written")
				}
				if kind == stripefake.FaultHangAfterCommit && !res.Exchange.Timeout {
					t.Errorf("hang not reported as a timeout: %v", res.Exchange.Err)
				}
				lr, err := p.Lookup(context.Background(), in.Operation, r)
				if err != nil || !lr.Found || lr.ProviderID == "" {
					t.Fatalf("lookup: %+v %v", lr, err)
				}
			})
		}
	}
}

// TestLookupEveryPath_R13_R16 covers each lookup: Search for PaymentIntents,
// transfer_group for transfers, newest-page lists for refunds and payouts
// (with their later states), clean "not found", an inconclusive page, a
// failed lookup and an unsupported operation.
func TestLookupEveryPath_R13_R16(t *testing.T) {
	ctx := context.Background()
	f, p := newFake(t)
	rc := ref()
	pi := submit(t, p, charge("1000", "JPY", stripefake.PMVisa), rc, key())
	rr := ref()
	mustOutcome(t, submit(t, p, refund(pi.ProviderID, "400", "JPY"), rr, key()), attempts.OutcomeSucceeded)
	rt := ref()
	mustOutcome(t, submit(t, p, transfer("acct_1ABC", "5.12", "KWD"), rt, key()), attempts.OutcomeSucceeded)
	rp, rpf := ref(), ref()
	po := submit(t, p, payout("20.00", "BRL"), rp, key())
	pof := submit(t, p, payout("21.00", "BRL"), rpf, key())
	cases := []struct {
		op            providers.Operation
		ref           string
		amount, cur   string
		state         providers.State
		providerIDHas string
	}{
		{providers.OpCardCharge, rc, "1000", "JPY", providers.StateSucceeded, "pi_"},
		{providers.OpRefund, rr, "400", "JPY", providers.StateSucceeded, "re_"},
		{providers.OpAccountTransfer, rt, "5.120", "KWD", providers.StateSucceeded, "tr_"},
		{providers.OpBankPayout, rp, "20.00", "BRL", providers.StateProcessing, "po_"},
	}
	for _, c := range cases {
		lr, err := p.Lookup(ctx, c.op, c.ref)
		if err != nil || !lr.Found || lr.State != c.state || lr.Amount != c.amount || lr.Currency != c.cur ||
			!strings.HasPrefix(lr.ProviderID, c.providerIDHas) {
			t.Errorf("%s: %+v %v", c.op, lr, err)
		}
	}
	f.SetStatus(po.ProviderID, "paid", "")
	f.SetStatus(pof.ProviderID, "failed", "account_closed")
	if lr, _ := p.Lookup(ctx, providers.OpBankPayout, rp); lr.State != providers.StateSucceeded {
		t.Errorf("paid payout: %+v", lr)
	}
	if lr, _ := p.Lookup(ctx, providers.OpBankPayout, rpf); lr.State != providers.StateFailed || lr.FailureCode != "account_closed" {
		t.Errorf("failed payout: %+v", lr)
	}
	// Not found: a clean 200 with nothing, for every operation.
	for _, op := range []providers.Operation{providers.OpCardCharge, providers.OpRefund, providers.OpAccountTransfer, providers.OpBankPayout} {
		lr, err := p.Lookup(ctx, op, ref())
		if err != nil || lr.Found || lr.Exchange.Err != nil || lr.Exchange.StatusCode != http.StatusOK {
			t.Errorf("%s not found: %+v %v", op, lr, err)
		}
	}
	// A refund older than the newest page of 100: never a false "not found".
	now := f.Now()
	for i := 0; i < 100; i++ {
		f.Seed("refund", 100, "usd", ref(), now.Add(time.Minute))
	}
	lr, _ := p.Lookup(ctx, providers.OpRefund, ref())
	if lr.Found || !errors.Is(lr.Exchange.Err, stripe.ErrInconclusive) {
		t.Errorf("beyond the newest page: %+v", lr)
	}
	if lr, _ := p.Lookup(ctx, providers.OpRefund, rr); !errors.Is(lr.Exchange.Err, stripe.ErrInconclusive) {
		t.Errorf("the old refund is not on the newest page: %+v", lr)
	}
	// A lookup Stripe refuses is no answer.
	bad := newProvider(t, f.URL(), func(c *stripe.Config) { c.APIKey = "sk_test_wrongKey1" })
	if lr, _ := bad.Lookup(ctx, providers.OpCardCharge, rc); lr.Found || lr.Exchange.StatusCode != http.StatusUnauthorized {
		t.Errorf("refused lookup: %+v", lr)
	}
	if _, err := p.Lookup(ctx, providers.OpPixTransfer, rc); !errors.Is(err, providers.ErrUnsupported) {
		t.Errorf("pix lookup: %v", err)
	}
}

// TestStatementPaginates_R19: a day's objects of every kind, paginated with
// starting_after across several pages, nothing from the days around it.
func TestStatementPaginates_R19(t *testing.T) {
	f, p := newFake(t)
	day := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	want := map[providers.Operation]int{providers.OpCardCharge: 230, providers.OpRefund: 3, providers.OpAccountTransfer: 101,
		providers.OpBankPayout: 0}
	objects := map[providers.Operation]string{providers.OpCardCharge: "payment_intent", providers.OpRefund: "refund",
		providers.OpAccountTransfer: "transfer"}
	for op, n := range want {
		for i := 0; i < n; i++ {
			f.Seed(objects[op], 1050, "usd", ref(), day.Add(time.Duration(i)*time.Minute))
		}
	}
	f.Seed("payment_intent", 1, "usd", "", day.Add(-time.Second))
	f.Seed("payout", 1, "usd", "", day.Add(24*time.Hour))
	f.Seed("payment_intent", 777, "usd", "", day.Add(time.Hour)) // not saldo's: listed, without a reference
	entries, err := p.Statement(context.Background(), day.Add(13*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	got := map[providers.Operation]int{}
	seen := map[string]bool{}
	for _, e := range entries {
		if seen[e.ProviderID] {
			t.Fatalf("%s listed twice", e.ProviderID)
		}
		seen[e.ProviderID] = true
		got[e.Operation]++
		if e.At.Before(day) || !e.At.Before(day.Add(24*time.Hour)) {
			t.Errorf("%s at %s", e.ProviderID, e.At)
		}
	}
	want[providers.OpCardCharge]++
	for op, n := range want {
		if got[op] != n {
			t.Errorf("%s: %d entries, want %d", op, got[op], n)
		}
	}
	if n := f.Requests("GET /v1/payment_intents"); n != 3 {
		t.Errorf("%d pages of PaymentIntents, want 3", n)
	}
	if n := f.Requests("GET /v1/transfers"); n != 2 {
		t.Errorf("%d pages of transfers, want 2", n)
	}
}

// TestAPIKeyNeverLeaks: the key is in no log line, error, result or
// formatted configuration, even when the server echoes it.
func TestAPIKeyNeverLeaks(t *testing.T) {
	const secret = "sk_test_LeakCanary9f8e7d6c5b4a"
	log, buf := logBuffer()
	// stripe-mock quotes the Authorization header it refuses verbatim.
	echo := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":{"type":"invalid_request_error","message":"Authorization was '%s'"}}`, r.Header.Get("Authorization"))
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go echo.Serve(ln)
	t.Cleanup(func() { echo.Close() })
	cfg := stripe.Config{APIKey: secret, WebhookSecret: "whsec_canary", BaseURL: "http://" + ln.Addr().String(), Logger: log}
	p, err := stripe.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	res := submit(t, p, charge("1.00", "USD", stripefake.PMVisa), ref(), key())
	out = append(out, fmt.Sprintf("%+v %s %v", res, res.Exchange.Body, res.Exchange.Err))
	lr, _ := p.Lookup(context.Background(), providers.OpCardCharge, ref())
	out = append(out, fmt.Sprintf("%+v %s", lr, lr.Exchange.Body))
	_, serr := p.Statement(context.Background(), time.Now())
	out = append(out, fmt.Sprint(serr))
	_, werr := p.ParseWebhook(http.Header{}, []byte(`{}`), time.Now())
	out = append(out, fmt.Sprint(werr))
	out = append(out, fmt.Sprintf("%v %+v %#v", cfg, cfg, cfg))
	_, nerr := stripe.New(stripe.Config{APIKey: secret, BaseURL: "http://user:" + secret + "@host"})
	out = append(out, fmt.Sprint(nerr))
	log.Info("config", "cfg", cfg, "key", cfg.APIKey)
	out = append(out, buf.String())
	for _, s := range out {
		if strings.Contains(s, secret) || strings.Contains(s, "whsec_canary") {
			t.Fatalf("a secret leaked: %s", s)
		}
	}
	if !strings.Contains(buf.String(), "status=401") {
		t.Fatalf("the 401 alert was not logged: %s", buf.String())
	}
}

// TestNewRefusesBadConfiguration: no key, a base URL that is not http(s).
func TestNewRefusesBadConfiguration(t *testing.T) {
	for _, cfg := range []stripe.Config{{}, {APIKey: "sk_test_x", BaseURL: "ftp://x"}, {APIKey: "sk_test_x", BaseURL: "::"}} {
		if _, err := stripe.New(cfg); !errors.Is(err, stripe.ErrConfig) {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
	p, err := stripe.New(stripe.Config{APIKey: "sk_test_x"})
	if err != nil || p.Name() != "stripe" {
		t.Fatal(err)
	}
	c := p.Capabilities()
	if !c.IdempotencyKeys || c.KeyLifetime != 24*time.Hour || !c.LookupByReference || !c.Webhooks || !c.Statements ||
		c.ConsistencyWindow != time.Hour || c.Supports(providers.OpPixTransfer) || c.Supports(providers.OpPixCharge) ||
		!c.Supports(providers.OpAccountTransfer) || !c.Supports(providers.OpCardCharge) || !c.Supports(providers.OpRefund) ||
		!c.Supports(providers.OpBankPayout) {
		t.Fatalf("capabilities %+v", c)
	}
}

// TestLookupFailuresAreNoAnswer_R16: a 500, an unreadable body or a body
// that is not a list is never "not found".
func TestLookupFailuresAreNoAnswer_R16(t *testing.T) {
	for _, c := range []struct {
		name   string
		status int
		body   string
	}{
		{"500", http.StatusInternalServerError, `{"error":{"type":"api_error","message":"boom"}}`},
		{"unreadable", http.StatusOK, `{"object":"list","data":[`},
		{"not a list", http.StatusOK, `{"object":"payment_intent","id":"pi_1"}`},
		{"foreign object in list", http.StatusOK, `{"object":"list","data":[{"object":"charge","id":"ch_1"}],"has_more":false}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(c.status)
				fmt.Fprint(w, c.body)
			})}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go srv.Serve(ln)
			t.Cleanup(func() { srv.Close() })
			p := newProvider(t, "http://"+ln.Addr().String())
			for _, op := range []providers.Operation{providers.OpCardCharge, providers.OpRefund, providers.OpAccountTransfer, providers.OpBankPayout} {
				lr, err := p.Lookup(context.Background(), op, ref())
				if err != nil || lr.Found {
					t.Fatalf("%s: %+v %v", op, lr, err)
				}
				if lr.Exchange.StatusCode == http.StatusOK && !errors.Is(lr.Exchange.Err, stripe.ErrInconclusive) {
					t.Errorf("%s: a 200 that is not a readable list must be inconclusive: %+v", op, lr)
				}
			}
		})
	}
}

// TestIdempotencyKeyIsTheAttemptsKey_R4_R5: every create carries the
// attempt's key, unchanged, and the same bytes on a re-send.
func TestIdempotencyKeyIsTheAttemptsKey_R4_R5(t *testing.T) {
	f, p := newFake(t)
	f.Script(stripefake.Fault{Kind: stripefake.FaultServerError})
	var want []string
	for _, in := range []providers.OperationInput{charge("1.00", "USD", stripefake.PMVisa), payout("2.00", "USD"),
		transfer("acct_1ABC", "3.00", "USD")} {
		k := key()
		res := submit(t, p, in, ref(), k)
		want = append(want, k)
		if in.Operation == providers.OpCardCharge {
			mustOutcome(t, res, attempts.OutcomeUnknown) // the scripted 500
		}
	}
	if got := f.KeysSeen(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("keys seen %v, want %v", got, want)
	}
}

// R19: Stripe lists every object on the day it was created, so a bank
// payout (paid on arrival) and a refund (pending, then succeeded) may be
// listed days before saldo records them final; the adapter says so.
func TestStatementDatingDeclared_R19(t *testing.T) {
	p, err := stripe.New(stripe.Config{APIKey: "sk_test_x", WebhookSecret: "whsec_x"})
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []providers.Operation{providers.OpBankPayout, providers.OpRefund} {
		if w := providers.StatementWindow(p, op); w.Before != stripe.PayoutTransitDays || w.After != 1 {
			t.Errorf("%s: window %+v", op, w)
		}
	}
	for _, op := range []providers.Operation{providers.OpCardCharge, providers.OpAccountTransfer} {
		if w := providers.StatementWindow(p, op); w != providers.DefaultStatementDating {
			t.Errorf("%s: window %+v", op, w)
		}
	}
}

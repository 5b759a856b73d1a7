package charges_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

const (
	merchant = "m1"
	partner  = "m2" // split recipient
	agent    = "m3" // split recipient
	secret   = "whsec_test"
)

// env is one test's world: its own database, a simulated PSP over real HTTP
// that sends its webhooks to a receiver in the test (which verifies them
// with the provider's ParseWebhook and hands them to HandleProviderEvent),
// the attempts core and charges, all on one manual clock.
type env struct {
	t     testing.TB
	ctx   context.Context
	pool  *pgxpool.Pool
	clock *sim.ManualClock
	srv   *sim.Server
	prov  *sim.Provider
	att   *attempts.Service
	svc   *charges.Service
	recv  *receiver
}

// receiver is the HTTP endpoint the sim posts webhooks to.
type receiver struct {
	env *env
	// lose: answer 503 without handling (the webhook is lost on our side).
	lose atomic.Bool

	mu       sync.Mutex
	events   []providers.WebhookEvent
	failures []error
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	if r.lose.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	e := r.env
	ev, err := e.prov.ParseWebhook(req.Header, body, e.clock.Now())
	if err != nil {
		r.fail(fmt.Errorf("parse webhook: %w", err))
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	handled, err := e.svc.HandleProviderEvent(req.Context(), e.prov.Name(), ev)
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
	if err != nil || !handled {
		r.fail(fmt.Errorf("event %s (%s): handled=%t err=%v", ev.ID, ev.Type, handled, err))
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (r *receiver) fail(err error) {
	r.mu.Lock()
	r.failures = append(r.failures, err)
	r.mu.Unlock()
}

func (r *receiver) received() []providers.WebhookEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]providers.WebhookEvent(nil), r.events...)
}

type opts struct {
	webhooks bool
	tune     func(*charges.Config)
	attTune  func(*attempts.Config)
	// noAudit: the test breaks an invariant on purpose.
	noAudit bool
	// readTimeout of the provider client (default 300ms).
	readTimeout time.Duration
}

// setup builds the env with merchants m1 (charging), m2 and m3 (split
// recipients). After the test it runs the full audit (ledger, attempts,
// payouts, charges: each paid charge credited once with the right legs)
// and the sim oracle (no reference with two money-moving operations), and
// checks the webhook receiver never failed.
func setup(t testing.TB, cfg sim.Config, o opts) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{t: t, ctx: ctx, pool: testdb.New(t), clock: sim.NewManualClock(t0)}
	e.recv = &receiver{env: e}
	if o.webhooks {
		hs := httptest.NewServer(e.recv)
		t.Cleanup(hs.Close)
		cfg.WebhookURL, cfg.WebhookSecret = hs.URL, secret
	}
	cfg.Clock = e.clock.Now
	e.srv = sim.NewServer(cfg).Start()
	t.Cleanup(e.srv.Close)
	e.prov = e.srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{
		ConnectTimeout: time.Second, ReadTimeout: cmp.Or(o.readTimeout, 300*time.Millisecond)}))
	var err error
	ac := attempts.Config{Pool: e.pool, Clock: e.clock, Providers: map[string]providers.Provider{e.prov.Name(): e.prov}}
	if o.attTune != nil {
		o.attTune(&ac)
	}
	e.att, err = attempts.New(ac)
	require.NoError(t, err)
	c := charges.Config{Pool: e.pool, Attempts: e.att, Provider: e.prov.Name(), Clock: e.clock}
	if o.tune != nil {
		o.tune(&c)
	}
	e.svc, err = charges.New(c)
	require.NoError(t, err)
	for _, m := range []string{merchant, partner, agent} {
		_, err = merchants.Create(ctx, e.pool, m, "Merchant "+m)
		require.NoError(t, err)
	}
	if !o.noAudit {
		t.Cleanup(e.auditClean)
	}
	return e
}

func (e *env) auditClean() {
	if e.t.Failed() {
		return
	}
	flushCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(e.t, e.srv.FlushWebhooks(flushCtx))
	res, err := audit.Run(context.Background(), e.pool)
	require.NoError(e.t, err)
	require.True(e.t, res.OK(), res.Summary())
	require.Empty(e.t, e.srv.Duplicates(), "the sim oracle saw a reference charged twice")
	e.recv.mu.Lock()
	defer e.recv.mu.Unlock()
	require.Empty(e.t, e.recv.failures, "the webhook receiver failed")
}

func brl(s string) money.Amount { return money.MustParse(s, "BRL") }

func (e *env) card(amount, token string) charges.ChargeRequest {
	return charges.ChargeRequest{MerchantID: merchant, Kind: charges.KindCard, Amount: brl(amount), CardToken: token}
}

func (e *env) pix(amount string) charges.ChargeRequest {
	return charges.ChargeRequest{MerchantID: merchant, Kind: charges.KindPix, Amount: brl(amount)}
}

func (e *env) create(req charges.ChargeRequest) charges.Charge {
	c, err := e.svc.Create(e.ctx, req)
	require.NoError(e.t, err)
	require.Equal(e.t, charges.StatusProcessing, c.Status)
	require.NotNil(e.t, c.AttemptID)
	return c
}

func (e *env) execute(c charges.Charge) attempts.Attempt {
	res, err := e.att.Execute(e.ctx, *c.AttemptID)
	require.NoError(e.t, err)
	return res.Attempt
}

func (e *env) resolveAfter(c charges.Charge, d time.Duration) attempts.ResolveResult {
	e.clock.Advance(d)
	res, err := e.att.Resolve(e.ctx, *c.AttemptID)
	require.NoError(e.t, err)
	return res
}

func (e *env) get(c charges.Charge) charges.Charge {
	got, err := e.svc.Get(e.ctx, c.MerchantID, c.ID)
	require.NoError(e.t, err)
	return got
}

func (e *env) flush() {
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	require.NoError(e.t, e.srv.FlushWebhooks(ctx))
}

// available returns a merchant's available balance in cur as a string.
func (e *env) available(m string, cur money.Currency) string {
	b, err := ledger.MerchantBalanceIn(e.ctx, e.pool, m, cur)
	require.NoError(e.t, err)
	return b.Available.StringFixed(cur.MinorUnits())
}

func (e *env) balance(spec ledger.AccountSpec) string {
	a, err := ledger.Balance(e.ctx, e.pool, spec.Code())
	if errors.Is(err, ledger.ErrAccountNotFound) {
		return "none"
	}
	require.NoError(e.t, err)
	return a.Format()
}

// credits counts the charge_credit ledger transactions of a charge.
func (e *env) credits(c charges.Charge) int {
	var n int
	require.NoError(e.t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM ledger_transactions
		WHERE cause_kind = $1 AND cause_id = $2`, charges.CauseCredit, c.ID).Scan(&n))
	return n
}

// moneyMoving counts the sim's succeeded operations for a reference (oracle).
func (e *env) moneyMoving(ref string) int {
	n := 0
	for _, op := range e.srv.Operations(ref) {
		if op.State == providers.StateSucceeded {
			n++
		}
	}
	return n
}

// A captured card charge credits merchant, fee and splits in the SAME
// transaction that records the attempt's success; the breakdown follows
// the merchant's fee rule and the split rules given at creation.
func TestCardChargeCapturedAndCredited(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, opts{})
	require.NoError(t, e.svc.SetFeeRule(e.ctx, merchant, money.BRL,
		charges.FeeRule{Percent: decimal.RequireFromString("2.5"), Fixed: decimal.RequireFromString("0.30")}))
	req := e.card("100.00", "tok_visa")
	req.Splits = []charges.SplitRule{
		{RecipientID: partner, Percent: decimal.RequireFromString("10")},
		{RecipientID: agent, Amount: decimal.RequireFromString("5.00")},
	}
	c := e.create(req)
	require.Equal(t, "2.80 BRL", c.Fee.String(), "2.5% of 100.00 + 0.30")
	require.Equal(t, "82.48 BRL", c.MerchantNet.String(), "97.20 net - 9.72 - 5.00")

	a := e.execute(c)
	require.Equal(t, attempts.StatusSucceeded, a.Status)
	got := e.get(c)
	require.Equal(t, charges.StatusPaid, got.Status)
	require.Equal(t, "worker", got.PaidBy)
	require.Equal(t, a.ProviderID, got.ProviderID)
	require.NotZero(t, got.CreditTransactionID)
	require.Len(t, got.Splits, 2)
	require.Equal(t, "9.72 BRL", got.Splits[0].Amount.String())

	require.Equal(t, "82.48", e.available(merchant, money.BRL))
	require.Equal(t, "9.72", e.available(partner, money.BRL))
	require.Equal(t, "5.00", e.available(agent, money.BRL))
	require.Equal(t, "2.80", e.balance(ledger.PlatformFees(money.BRL)))
	require.Equal(t, "-100.00", e.balance(ledger.ProviderClearing("sim", money.BRL)))

	tx, err := ledger.TransactionByID(e.ctx, e.pool, got.CreditTransactionID)
	require.NoError(t, err)
	require.Equal(t, c.ID, tx.CauseID)
	require.Equal(t, a.ID.String(), tx.Metadata["attempt_id"], "the credit names the attempt")
	require.Len(t, tx.Postings, 5)
	require.Equal(t, 1, e.moneyMoving(a.Reference))

	// Refunds lock a paid charge; another merchant's charge is not found.
	require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		locked, err := e.svc.LockForRefund(e.ctx, tx, merchant, c.ID)
		require.NoError(t, err)
		require.Equal(t, charges.StatusPaid, locked.Status)
		require.Equal(t, a.ProviderID, locked.ProviderID)
		require.Equal(t, a.Reference, locked.Reference)
		require.Equal(t, "100.00 BRL", locked.Amount.String())
		_, err = e.svc.LockForRefund(e.ctx, tx, partner, c.ID)
		require.ErrorIs(t, err, charges.ErrNotFound)
		return nil
	}))
}

// R1/R2: a decline is a definitive failure with the provider's reason; no
// money moves and the charge is not refundable.
func TestCardChargeDeclined(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, opts{})
	c := e.create(e.card("30.00", sim.TokenDecline))
	a := e.execute(c)
	require.Equal(t, attempts.StatusFailed, a.Status)
	got := e.get(c)
	require.Equal(t, charges.StatusFailed, got.Status)
	require.Equal(t, "generic_decline", got.FailureCode)
	require.Equal(t, "your card was declined", got.FailureReason)
	require.Zero(t, got.CreditTransactionID)
	require.Equal(t, 0, e.credits(c))
	require.Equal(t, "0.00", e.available(merchant, money.BRL))
	require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		_, err := e.svc.LockForRefund(e.ctx, tx, merchant, c.ID)
		var nr *charges.NotRefundableError
		require.ErrorAs(t, err, &nr)
		require.ErrorIs(t, err, charges.ErrNotRefundable)
		require.Equal(t, charges.StatusFailed, nr.Status)
		return nil
	}))
}

// R1, R14: the provider captured the card and the connection hung past our
// read timeout. The attempt is unknown, the charge processing and nothing
// credited; it is never re-sent; a lookup by reference resolves it and the
// merchant is credited exactly once (sim oracle: one operation).
func TestCardTimeoutAfterCaptureResolvedByLookup(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{Faults: []sim.FaultRule{{Kind: sim.FaultHangAfter, Times: 1}}}, opts{})
	c := e.create(e.card("42.10", "tok_mastercard"))
	a := e.execute(c)
	require.Equal(t, attempts.StatusUnknown, a.Status)
	require.Equal(t, charges.StatusProcessing, e.get(c).Status)
	require.Equal(t, 0, e.credits(c), "unknown credits nothing")

	again := e.execute(c)
	require.Equal(t, a.CallCount, again.CallCount, "R14: unknown is resolved by query, not by re-sending")

	r := e.resolveAfter(c, 31*time.Second)
	require.True(t, r.Transitioned)
	require.Equal(t, attempts.StatusSucceeded, r.Attempt.Status)
	got := e.get(c)
	require.Equal(t, charges.StatusPaid, got.Status)
	require.Equal(t, "resolver", got.PaidBy)
	require.Equal(t, 1, e.credits(c))
	require.Equal(t, "42.10", e.available(merchant, money.BRL))
	require.Len(t, e.srv.Operations(a.Reference), 1, "exactly one operation at the provider")

	// A late resolution changes nothing.
	r = e.resolveAfter(c, time.Hour)
	require.False(t, r.Transitioned)
	require.Equal(t, 1, e.credits(c))
}

// Pix: the attempt creates the cob under txid = the attempt's reference;
// the charge awaits payment with the copy-and-paste payload and expiry and
// a poll job is enqueued in the same transaction; the payer pays through the
// sim, whose webhook (verified by the provider's ParseWebhook) credits the
// charge.
func TestPixPaidByWebhook(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, opts{webhooks: true})
	req := e.pix("50.00")
	req.PixExpiresIn = 15 * time.Minute
	req.Splits = []charges.SplitRule{{RecipientID: partner, Percent: decimal.RequireFromString("33.3333")}}
	c := e.create(req)
	a := e.execute(c)
	require.Equal(t, attempts.StatusPending, a.Status, "the cob exists; the attempt waits for the payment")
	require.Equal(t, string(providers.StateProcessing), a.ProviderState)
	e.flush() // the cob-created webhook
	got := e.get(c)
	require.Equal(t, charges.StatusAwaitingPayment, got.Status)
	require.NotNil(t, got.Pix)
	require.Len(t, got.Reference, 32)
	require.Equal(t, got.Reference, got.Pix.TxID)
	require.NotEmpty(t, got.Pix.CopyPaste)
	require.True(t, t0.Add(15*time.Minute).Equal(got.Pix.ExpiresAt), "expiry %s", got.Pix.ExpiresAt)
	require.Equal(t, 0, e.credits(c))
	var jobs int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM river_job WHERE kind = $1
		AND args->>'charge_id' = $2`, charges.PollPixChargeKind, c.ID).Scan(&jobs))
	require.Equal(t, 1, jobs, "poll job enqueued with the cob")

	_, err := e.srv.PayCob(got.Reference, "Maria", "12345678909")
	require.NoError(t, err)
	e.flush()
	got = e.get(c)
	require.Equal(t, charges.StatusPaid, got.Status)
	require.Equal(t, "webhook", got.PaidBy)
	require.Equal(t, 1, e.credits(c))
	// 50.00 * 33.3333% = 16.666650 -> floor 16.66; the 0.00665 remainder stays with the merchant.
	require.Equal(t, "16.66", e.available(partner, money.BRL))
	require.Equal(t, "33.34", e.available(merchant, money.BRL))

	// The poll job finds nothing left to do.
	res, err := e.svc.Poll(e.ctx, c.ID)
	require.NoError(t, err)
	require.False(t, res.Changed)
	require.Zero(t, res.RetryIn)
	require.Equal(t, 1, e.credits(c))
	require.Equal(t, 1, e.moneyMoving(got.Reference))
}

// The payment webhook is lost (our endpoint answers 503 and the sim gives
// up): the poll job's lookup finds the cob paid and credits it.
func TestPixWebhookLostPollingFindsIt(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{WebhookMaxAttempts: 1}, opts{webhooks: true})
	c := e.create(e.pix("10.01"))
	e.execute(c)
	e.flush()
	got := e.get(c)
	require.Equal(t, charges.StatusAwaitingPayment, got.Status)

	res, err := e.svc.Poll(e.ctx, c.ID)
	require.NoError(t, err)
	require.False(t, res.Changed)
	require.Equal(t, 30*time.Second, res.RetryIn, "active cob: look again after the interval")

	e.recv.lose.Store(true)
	_, err = e.srv.PayCob(got.Reference, "", "")
	require.NoError(t, err)
	e.flush()
	require.Equal(t, charges.StatusAwaitingPayment, e.get(c).Status, "the webhook was lost")
	dropped := false
	for _, d := range e.srv.WebhookDeliveries() {
		dropped = dropped || d.Dropped
	}
	require.True(t, dropped)
	e.recv.lose.Store(false)

	res, err = e.svc.Poll(e.ctx, c.ID)
	require.NoError(t, err)
	require.True(t, res.Changed)
	require.Equal(t, charges.StatusPaid, res.Charge.Status)
	require.Equal(t, "resolver", res.Charge.PaidBy)
	require.Equal(t, "10.01", e.available(merchant, money.BRL))
	require.Equal(t, 1, e.credits(c))
}

// Webhooks duplicated and reordered by the sim, then every event delivered
// again in reverse order, plus a poll: the payment is credited once and a
// "processing" event after the payment changes nothing.
func TestPixDuplicateAndOutOfOrderWebhooksCreditOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{Seed: 7, WebhookDuplicateRate: 1, WebhookReorderRate: 1}, opts{webhooks: true})
	c := e.create(e.pix("77.77"))
	e.execute(c)
	ref := e.get(c).Reference
	_, err := e.srv.PayCob(ref, "", "")
	require.NoError(t, err)
	e.flush()
	got := e.get(c)
	require.Equal(t, charges.StatusPaid, got.Status)

	evs := e.recv.received()
	types := map[string]int{}
	for _, ev := range evs {
		types[ev.Type]++
	}
	require.Equal(t, 2, types["pix_charge.processing"], "duplicated: %v", types)
	require.Equal(t, 2, types["pix_charge.succeeded"], "duplicated: %v", types)

	for i := len(evs) - 1; i >= 0; i-- {
		handled, err := e.svc.HandleProviderEvent(e.ctx, e.prov.Name(), evs[i])
		require.NoError(t, err)
		require.True(t, handled)
	}
	res, err := e.svc.Poll(e.ctx, c.ID)
	require.NoError(t, err)
	require.False(t, res.Changed)
	require.Equal(t, 1, e.credits(c))
	require.Equal(t, "77.77", e.available(merchant, money.BRL))
	after := e.get(c)
	require.Equal(t, got.CreditTransactionID, after.CreditTransactionID)
	require.Equal(t, got.UpdatedAt, after.UpdatedAt)

	// A concurrent storm of the same payment event: still one credit.
	var paidEv providers.WebhookEvent
	for _, ev := range evs {
		if ev.State == providers.StateSucceeded {
			paidEv = ev
		}
	}
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.svc.HandleProviderEvent(e.ctx, e.prov.Name(), paidEv)
			require.NoError(t, err)
		}()
	}
	wg.Wait()
	require.Equal(t, 1, e.credits(c))

	// An event that is not a charge's is not handled; one from another
	// provider is refused.
	handled, err := e.svc.HandleProviderEvent(e.ctx, e.prov.Name(), providers.WebhookEvent{ID: "evt_x",
		Reference: "0123456789abcdef0123456789abcdef", State: providers.StateSucceeded})
	require.NoError(t, err)
	require.False(t, handled)
	_, err = e.svc.HandleProviderEvent(e.ctx, "stripe", paidEv)
	require.ErrorIs(t, err, charges.ErrEventMismatch)
}

// Two confirmations racing (webhook and poll) credit once.
func TestPixWebhookAndPollRaceCreditOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{WebhookMaxAttempts: 1}, opts{webhooks: true})
	for i := range 5 {
		c := e.create(e.pix(fmt.Sprintf("%d.99", i+1)))
		e.execute(c)
		e.flush()
		ref := e.get(c).Reference
		e.recv.lose.Store(true)
		_, err := e.srv.PayCob(ref, "", "")
		require.NoError(t, err)
		e.flush()
		e.recv.lose.Store(false)
		paid := providers.WebhookEvent{ID: fmt.Sprintf("evt_race_%d", i), Type: "pix_charge.succeeded",
			Operation: providers.OpPixCharge, Reference: ref, State: providers.StateSucceeded}
		var wg sync.WaitGroup
		for j := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if j%2 == 0 {
					_, err := e.svc.Poll(e.ctx, c.ID)
					require.NoError(t, err)
					return
				}
				_, err := e.svc.HandleProviderEvent(e.ctx, e.prov.Name(), paid)
				require.NoError(t, err)
			}()
		}
		wg.Wait()
		require.Equal(t, charges.StatusPaid, e.get(c).Status)
		require.Equal(t, 1, e.credits(c))
	}
}

// The cob expires unpaid when the clock passes its expiry: the sim's
// expiry webhook makes the charge expired; the payer can no longer pay and
// nothing is credited.
func TestPixExpiresByWebhook(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, opts{webhooks: true})
	req := e.pix("20.00")
	req.PixExpiresIn = 10 * time.Minute
	c := e.create(req)
	e.execute(c)
	e.flush()
	require.Equal(t, charges.StatusAwaitingPayment, e.get(c).Status)

	e.clock.Advance(11 * time.Minute)
	e.flush()
	got := e.get(c)
	require.Equal(t, charges.StatusExpired, got.Status)
	require.Equal(t, "cob_expired", got.FailureCode)
	_, err := e.srv.PayCob(got.Reference, "", "")
	require.ErrorIs(t, err, sim.ErrCobExpired)
	res, err := e.svc.Poll(e.ctx, c.ID)
	require.NoError(t, err)
	require.False(t, res.Changed)
	require.Equal(t, 0, e.credits(c))
	require.Equal(t, "0.00", e.available(merchant, money.BRL))
}

// Without webhooks the poll schedules its next look at the expiry and, once
// the clock passes it, finds the cob expired.
func TestPixExpiresByPoll(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, opts{tune: func(c *charges.Config) { c.PollInterval = time.Hour }})
	req := e.pix("20.00")
	req.PixExpiresIn = 10 * time.Minute
	c := e.create(req)
	e.execute(c)
	res, err := e.svc.Poll(e.ctx, c.ID)
	require.NoError(t, err)
	require.Equal(t, 10*time.Minute+time.Second, res.RetryIn, "next look right after the expiry")
	e.clock.Advance(res.RetryIn)
	res, err = e.svc.Poll(e.ctx, c.ID)
	require.NoError(t, err)
	require.True(t, res.Changed)
	require.Equal(t, charges.StatusExpired, res.Charge.Status)
	require.Equal(t, 0, e.credits(c))
}

// The cob's creation timed out after the provider created it (unknown); the
// payer paid anyway. A lookup finds the cob paid: the attempt resolves
// succeeded with the paid cob as its data and the charge is credited in that
// same transaction (R14, R16).
func TestPixCreationUnknownThenPaidResolvedByLookup(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{Faults: []sim.FaultRule{{Kind: sim.FaultHangAfter, Times: 1}}}, opts{})
	c := e.create(e.pix("15.00"))
	a := e.execute(c)
	require.Equal(t, attempts.StatusUnknown, a.Status)
	r := e.resolveAfter(c, 31*time.Second)
	require.Equal(t, attempts.StatusUnknown, r.Attempt.Status, "the cob is active: still open")
	waiting := e.get(c)
	require.Equal(t, charges.StatusAwaitingPayment, waiting.Status, "the lookup found the cob")
	require.NotNil(t, waiting.Pix)
	require.Equal(t, 0, e.credits(c))

	_, err := e.srv.PayCob(a.Reference, "", "")
	require.NoError(t, err)
	r = e.resolveAfter(c, r.RetryIn+time.Second)
	require.Equal(t, attempts.StatusSucceeded, r.Attempt.Status)
	got := e.get(c)
	require.Equal(t, charges.StatusPaid, got.Status)
	require.Equal(t, "resolver", got.PaidBy)
	require.Equal(t, 1, e.credits(c))
	require.Equal(t, 1, len(e.srv.Operations(a.Reference)))
}

// R17: the cob's creation timed out; the provider's "cob created" webhook
// shows the cob (the charge awaits payment, the attempt stays open), then the
// payment webhook resolves the attempt and credits.
func TestPixCreationUnknownResolvedByWebhook(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{Faults: []sim.FaultRule{{Kind: sim.FaultHangAfter, Times: 1}}}, opts{webhooks: true})
	c := e.create(e.pix("15.00"))
	e.execute(c)
	e.flush()
	got := e.get(c)
	require.Equal(t, charges.StatusAwaitingPayment, got.Status)
	require.NotNil(t, got.Pix)
	att, err := e.att.Get(e.ctx, e.pool, *c.AttemptID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusUnknown, att.Status)
	require.Equal(t, string(providers.StateProcessing), att.ProviderState)

	_, err = e.srv.PayCob(got.Reference, "", "")
	require.NoError(t, err)
	e.flush()
	got = e.get(c)
	require.Equal(t, charges.StatusPaid, got.Status)
	require.Equal(t, "webhook", got.PaidBy)
	require.Equal(t, 1, e.credits(c))
	require.Len(t, e.srv.Operations(got.Reference), 1)
}

// JPY (no minor units) with a fee and splits that do not divide evenly:
// the credit's legs sum exactly to the charge and the audit checks each leg.
func TestJPYChargeWithUnevenSplits(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, opts{})
	require.NoError(t, e.svc.SetFeeRule(e.ctx, "", money.JPY,
		charges.FeeRule{Percent: decimal.RequireFromString("3.6"), Fixed: decimal.RequireFromString("40")}))
	req := charges.ChargeRequest{MerchantID: merchant, Kind: charges.KindCard, Amount: money.MustParse("1001", "JPY"),
		CardToken: "tok_jcb", Splits: []charges.SplitRule{
			{RecipientID: partner, Percent: decimal.RequireFromString("33.3333")},
			{RecipientID: agent, Percent: decimal.RequireFromString("33.3333")},
		}}
	c := e.create(req)
	// fee = round_half_up(1001 * 3.6%) + 40 = 36 + 40 = 76; net 925;
	// splits floor(925 * 33.3333%) = 308 each; merchant 925 - 616 = 309.
	require.Equal(t, "76 JPY", c.Fee.String())
	require.Equal(t, "309 JPY", c.MerchantNet.String())
	require.Equal(t, attempts.StatusSucceeded, e.execute(c).Status)
	require.Equal(t, "309", e.available(merchant, money.JPY))
	require.Equal(t, "308", e.available(partner, money.JPY))
	require.Equal(t, "308", e.available(agent, money.JPY))
	require.Equal(t, "76", e.balance(ledger.PlatformFees(money.JPY)))
	require.Equal(t, "-1001", e.balance(ledger.ProviderClearing("sim", money.JPY)))
}

func TestValidationNamesFieldAndWritesNothing(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, opts{})
	split := func(rs ...charges.SplitRule) charges.ChargeRequest {
		r := e.card("10.00", "tok_visa")
		r.Splits = rs
		return r
	}
	pct := decimal.RequireFromString
	cases := map[string]charges.ChargeRequest{
		"amount":                   e.card("0.00", "tok_visa"),
		"kind":                     {MerchantID: merchant, Kind: "boleto", Amount: brl("1.00")},
		"card_token":               e.card("1.00", "4111111111111111"),
		"currency":                 {MerchantID: merchant, Kind: charges.KindPix, Amount: money.MustParse("1.00", "USD")},
		"pix_expires_in_seconds":   {MerchantID: merchant, Kind: charges.KindPix, Amount: brl("1.00"), PixExpiresIn: time.Second},
		"payer_tax_id":             {MerchantID: merchant, Kind: charges.KindPix, Amount: brl("1.00"), PayerTaxID: "123"},
		"splits[1].amount":         split(charges.SplitRule{RecipientID: partner, Amount: pct("6.00")}, charges.SplitRule{RecipientID: agent, Amount: pct("4.01")}),
		"splits[1].percent":        split(charges.SplitRule{RecipientID: partner, Percent: pct("60")}, charges.SplitRule{RecipientID: agent, Percent: pct("41")}),
		"splits[0].recipient_id":   split(charges.SplitRule{RecipientID: merchant, Percent: pct("1")}),
		"splits[0]":                split(charges.SplitRule{RecipientID: partner, Percent: pct("1"), Amount: pct("1.00")}),
		"splits[0].amount.decimal": split(charges.SplitRule{RecipientID: partner, Amount: pct("1.001")}),
	}
	for field, req := range cases {
		_, err := e.svc.Create(e.ctx, req)
		var fe *charges.FieldError
		require.True(t, errors.As(err, &fe), "%s: %v", field, err)
		require.ErrorIs(t, err, charges.ErrInvalid)
		want := field
		if field == "splits[0].amount.decimal" {
			want = "splits[0].amount"
		}
		require.Equal(t, want, fe.Field, "%s: %v", field, err)
	}
	_, err := e.svc.Create(e.ctx, split(charges.SplitRule{RecipientID: "ghost", Percent: pct("5")}))
	require.ErrorIs(t, err, charges.ErrUnknownMerchant)
	var fe *charges.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "splits[0].recipient_id", fe.Field)
	_, err = e.svc.Create(e.ctx, charges.ChargeRequest{MerchantID: "ghost", Kind: charges.KindCard, Amount: brl("1.00"), CardToken: "tok_visa"})
	require.ErrorIs(t, err, charges.ErrUnknownMerchant)
	require.ErrorIs(t, e.svc.SetFeeRule(e.ctx, merchant, money.BRL, charges.FeeRule{Percent: pct("101")}), charges.ErrInvalid)
	require.ErrorIs(t, e.svc.SetFeeRule(e.ctx, merchant, money.BRL, charges.FeeRule{Fixed: pct("0.001")}), charges.ErrInvalid)

	list, _, err := e.svc.List(e.ctx, charges.ListParams{MerchantID: merchant})
	require.NoError(t, err)
	require.Empty(t, list)
	var n int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM attempts`).Scan(&n))
	require.Zero(t, n)
}

// Creation is idempotent for the caller: the same key and request give the
// same charge (20 concurrent creators make one charge and one attempt); the
// same key with another request is a typed conflict.
func TestCreateIdempotentForCaller(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, opts{})
	req := e.card("10.00", "tok_visa")
	req.ClientKey = "order-42"
	ids := make([]string, 20)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := e.svc.Create(e.ctx, req)
			require.NoError(t, err)
			ids[i] = c.ID
		}()
	}
	wg.Wait()
	for _, id := range ids {
		require.Equal(t, ids[0], id)
	}
	other := req
	other.Amount = brl("10.01")
	_, err := e.svc.Create(e.ctx, other)
	require.ErrorIs(t, err, charges.ErrIdempotencyConflict)
	var n int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM attempts`).Scan(&n))
	require.Equal(t, 1, n)
	c := e.get(charges.Charge{ID: ids[0], MerchantID: merchant})
	require.Equal(t, attempts.StatusSucceeded, e.execute(c).Status)
	again, err := e.svc.Create(e.ctx, req)
	require.NoError(t, err)
	require.Equal(t, charges.StatusPaid, again.Status, "the replay shows the charge as it is now")
}

func TestGetAndListAreMerchantScoped(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, opts{})
	var made []charges.Charge
	for i := range 5 {
		made = append(made, e.create(e.card(fmt.Sprintf("%d.00", i+1), sim.TokenDecline)))
		e.clock.Advance(time.Second)
	}
	for _, c := range made {
		e.execute(c)
	}
	_, err := e.svc.Get(e.ctx, partner, made[0].ID)
	require.ErrorIs(t, err, charges.ErrNotFound)
	list, _, err := e.svc.List(e.ctx, charges.ListParams{MerchantID: partner})
	require.NoError(t, err)
	require.Empty(t, list)

	var seen []string
	cursor := ""
	for {
		page, next, err := e.svc.List(e.ctx, charges.ListParams{MerchantID: merchant, Limit: 2, Cursor: cursor,
			Status: charges.StatusFailed})
		require.NoError(t, err)
		for _, c := range page {
			seen = append(seen, c.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	require.Len(t, seen, 5)
	for i, id := range seen {
		require.Equal(t, made[len(made)-1-i].ID, id, "newest first")
	}
	_, _, err = e.svc.List(e.ctx, charges.ListParams{MerchantID: merchant, Cursor: "zz"})
	require.ErrorIs(t, err, charges.ErrInvalid)
}

// SubmitInline: Create makes the first call itself, so a Pix caller gets the
// copy-and-paste payload in the answer.
func TestSubmitInlineReturnsPixPayload(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, opts{tune: func(c *charges.Config) { c.SubmitInline = true }})
	c, err := e.svc.Create(e.ctx, e.pix("9.90"))
	require.NoError(t, err)
	require.Equal(t, charges.StatusAwaitingPayment, c.Status)
	require.NotNil(t, c.Pix)
	require.NotEmpty(t, c.Pix.CopyPaste)
	_, err = e.srv.PayCob(c.Reference, "", "")
	require.NoError(t, err)
	res, err := e.svc.Poll(e.ctx, c.ID)
	require.NoError(t, err)
	require.Equal(t, charges.StatusPaid, res.Charge.Status)
}

// A paid-cob webhook whose amount differs from the charge's is refused and
// credits nothing (the attempt stays open for the lookup to decide).
func TestEventWithWrongAmountIsRefused(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, opts{})
	c := e.create(e.pix("10.00"))
	e.execute(c)
	ref := e.get(c).Reference
	handled, err := e.svc.HandleProviderEvent(e.ctx, e.prov.Name(), providers.WebhookEvent{ID: "evt_bad",
		Operation: providers.OpPixCharge, Reference: ref, State: providers.StateSucceeded, Amount: "1.00", Currency: "BRL"})
	require.True(t, handled)
	require.ErrorIs(t, err, charges.ErrEventMismatch)
	require.Equal(t, charges.StatusAwaitingPayment, e.get(c).Status)
	require.Equal(t, 0, e.credits(c))
	// Leave nothing open for the audit: the cob expires.
	e.clock.Advance(2 * time.Hour)
	res, err := e.svc.Poll(e.ctx, c.ID)
	require.NoError(t, err)
	require.Equal(t, charges.StatusExpired, res.Charge.Status)
}

// Verify finds what it promises to find: a credit for an unpaid charge and
// a paid charge whose credit is missing or wrong.
func TestVerifyCatchesBrokenInvariants(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, opts{noAudit: true})
	ok, err := charges.Verify(e.ctx, e.pool)
	require.NoError(t, err)
	require.Empty(t, ok)

	c := e.create(e.card("10.00", "tok_visa")) // processing: not paid
	fees, err := ledger.EnsureAccount(e.ctx, e.pool, ledger.PlatformFees(money.BRL))
	require.NoError(t, err)
	clearing, err := ledger.EnsureAccount(e.ctx, e.pool, ledger.ProviderClearing("sim", money.BRL))
	require.NoError(t, err)
	_, err = ledger.Post(e.ctx, e.pool, ledger.TransactionInput{IdempotencyKey: "bogus", CauseKind: charges.CauseCredit,
		CauseID: c.ID, Postings: []ledger.PostingInput{
			{AccountID: clearing.ID, Amount: decimal.RequireFromString("-3.00"), Currency: money.BRL},
			{AccountID: fees.ID, Amount: decimal.RequireFromString("3.00"), Currency: money.BRL},
		}})
	require.NoError(t, err)
	vs, err := charges.Verify(e.ctx, e.pool)
	require.NoError(t, err)
	checks := map[string]bool{}
	for _, v := range vs {
		checks[v.Check] = true
	}
	require.True(t, checks["credit_count"], "%v", vs)
	require.True(t, checks["credit_legs"], "%v", vs)
	res, err := audit.Run(e.ctx, e.pool)
	require.NoError(t, err)
	require.False(t, res.OK())
	require.Contains(t, res.Summary(), "charges/credit_count")
}

// Fee rules: the merchant's own rule wins over the platform default for the
// currency, which wins over Config.DefaultFeePercent; a rule set again
// replaces the old one; a charge keeps the rule it was created with.
func TestFeeRulePrecedence(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, opts{tune: func(c *charges.Config) { c.DefaultFeePercent = decimal.RequireFromString("1") }})
	d := decimal.RequireFromString
	rule := func(m string) charges.FeeRule {
		r, err := e.svc.FeeRuleFor(e.ctx, e.pool, m, money.BRL)
		require.NoError(t, err)
		return r
	}
	require.Equal(t, "1", rule(merchant).Percent.String(), "config default")
	first := e.create(e.card("10.00", sim.TokenDecline))
	require.Equal(t, "0.10 BRL", first.Fee.String())

	require.NoError(t, e.svc.SetFeeRule(e.ctx, "", money.BRL, charges.FeeRule{Percent: d("2")}))
	require.Equal(t, "2", rule(merchant).Percent.String(), "platform default for BRL")
	require.NoError(t, e.svc.SetFeeRule(e.ctx, merchant, money.BRL, charges.FeeRule{Percent: d("3"), Fixed: d("0.50")}))
	require.NoError(t, e.svc.SetFeeRule(e.ctx, merchant, money.BRL, charges.FeeRule{Percent: d("4"), Fixed: d("0.25")}))
	r := rule(merchant)
	require.Equal(t, "4", r.Percent.String(), "the merchant's rule, replaced")
	require.Equal(t, "0.25", r.Fixed.StringFixed(2))
	require.Equal(t, "2", rule(partner).Percent.String(), "others keep the platform default")

	second := e.create(e.card("10.00", sim.TokenDecline))
	require.Equal(t, "0.65 BRL", second.Fee.String())
	require.Equal(t, "0.10 BRL", e.get(first).Fee.String(), "a charge keeps its rule")
	e.execute(first)
	e.execute(second)
	require.ErrorIs(t, e.svc.SetFeeRule(e.ctx, "ghost", money.BRL, charges.FeeRule{}), charges.ErrUnknownMerchant)
}

// A Stripe PaymentMethod id ("pm_...") passes saldo's own card_token check;
// whether the charge's provider takes it is the adapter's call: the sim
// takes only tok_ tokens and refuses it naming card_token, writing nothing.
func TestPaymentMethodIDLeftToTheProvider(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, opts{})
	_, err := e.svc.Create(e.ctx, e.card("1.00", "pm_card_visa"))
	var fe *charges.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "card_token", fe.Field)
	require.Contains(t, fe.Reason, "no such token", "refused by the provider, not by saldo's pattern")
	var n int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM charges`).Scan(&n))
	require.Zero(t, n)
	_, err = e.svc.Create(e.ctx, e.card("1.00", "card_1234"))
	require.ErrorAs(t, err, &fe)
	require.Contains(t, fe.Reason, "must look like tok_... or pm_...")
}

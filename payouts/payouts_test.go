package payouts_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// env is one test's world: its own database, a simulated PSP over real HTTP,
// the attempts core and payouts, sharing one manual clock.
type env struct {
	t     testing.TB
	ctx   context.Context
	pool  *pgxpool.Pool
	clock *sim.ManualClock
	srv   *sim.Server
	prov  *sim.Provider
	att   *attempts.Service
	svc   *payouts.Service
	// tampered: the test breaks invariants on purpose and asserts the
	// audit's findings itself; auditClean leaves it alone.
	tampered bool
}

const merchant = "m1"

// simReadTimeout is the read timeout of the tests' sim providers: they
// assert successes, so it must be long enough that a loaded machine's slow
// answer is not read as unknown (300 ms was not, R3), and it bounds how
// long each of the sim's hang faults takes to be read as a timeout (the
// sim's HangFor stays far above it).
const simReadTimeout = time.Second

func brl(s string) money.Amount { return money.MustParse(s, "BRL") }

// setup builds the env and funds merchant m1 with balance. After the test,
// it runs the full audit (R22: reserved == open outgoing attempts, ledger
// balanced, no negative, chains intact) and the sim oracle (nobody paid twice).
func setup(t *testing.T, cfg sim.Config, balance string) *env {
	t.Helper()
	return setupTB(t, cfg, balance)
}

func setupTB(t testing.TB, cfg sim.Config, balance string) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{t: t, ctx: ctx, pool: testdb.New(t), clock: sim.NewManualClock(t0)}
	cfg.Clock = e.clock.Now
	e.srv = sim.NewServer(cfg).Start()
	t.Cleanup(e.srv.Close)
	e.prov = e.srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{
		ConnectTimeout: time.Second, ReadTimeout: simReadTimeout}))
	var err error
	e.att, err = attempts.New(attempts.Config{Pool: e.pool, Clock: e.clock,
		Providers: map[string]providers.Provider{e.prov.Name(): e.prov}})
	require.NoError(t, err)
	e.svc, err = payouts.New(payouts.Config{Pool: e.pool, Attempts: e.att, Provider: e.prov.Name(), Clock: e.clock})
	require.NoError(t, err)
	_, err = merchants.Create(ctx, e.pool, merchant, "Loja da Ana")
	require.NoError(t, err)
	_, err = merchants.Fund(ctx, e.pool, merchants.Funding{MerchantID: merchant, Amount: brl(balance),
		Key: "initial", Reason: "test funding", Actor: "test"})
	require.NoError(t, err)
	t.Cleanup(e.auditClean)
	return e
}

func (e *env) auditClean() {
	if e.tampered {
		return
	}
	res, err := audit.Run(context.Background(), e.pool)
	require.NoError(e.t, err)
	require.True(e.t, res.OK(), res.Summary())
	require.Empty(e.t, e.srv.Duplicates(), "the sim oracle saw a reference paid twice")
}

func pixTo(email string) *providers.Destination {
	return &providers.Destination{PixKey: &providers.PixKey{Type: payouts.PixKeyEmail, Value: email}}
}

func (e *env) pix(amount string) payouts.PayoutRequest {
	return payouts.PayoutRequest{MerchantID: merchant, Operation: providers.OpPixTransfer,
		Amount: brl(amount), Destination: pixTo("joao@example.com")}
}

// balances returns (available, reserved) of m1 in BRL as strings.
func (e *env) balances() (string, string) {
	b, err := ledger.MerchantBalanceIn(e.ctx, e.pool, merchant, brl("1").Currency())
	require.NoError(e.t, err)
	return b.Available.StringFixed(2), b.Reserved.StringFixed(2)
}

func (e *env) attempt(p payouts.Payout) attempts.Attempt {
	require.NotNil(e.t, p.CurrentAttemptID)
	a, err := e.att.Get(e.ctx, e.pool, *p.CurrentAttemptID)
	require.NoError(e.t, err)
	return a
}

func (e *env) execute(p payouts.Payout) attempts.Attempt {
	res, err := e.att.Execute(e.ctx, *p.CurrentAttemptID)
	require.NoError(e.t, err)
	return res.Attempt
}

func (e *env) resolveAfter(p payouts.Payout, d time.Duration) attempts.ResolveResult {
	e.clock.Advance(d)
	res, err := e.att.Resolve(e.ctx, *p.CurrentAttemptID)
	require.NoError(e.t, err)
	return res
}

func (e *env) get(p payouts.Payout) payouts.View {
	v, err := e.svc.Get(e.ctx, merchant, p.ID)
	require.NoError(e.t, err)
	return v
}

// moneyMoving counts the sim's operations for a reference (the oracle).
func (e *env) opsFor(a attempts.Attempt) int { return len(e.srv.Operations(a.Reference)) }

func TestPayoutSucceedsAndSettles(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	p, err := e.svc.CreatePayout(e.ctx, e.pix("30.00"))
	require.NoError(t, err)
	require.Equal(t, payouts.StatusProcessing, p.Status)
	av, res := e.balances()
	require.Equal(t, "70.00", av, "reserved in the opening transaction (R22)")
	require.Equal(t, "30.00", res)

	a := e.execute(p)
	require.Equal(t, attempts.StatusSucceeded, a.Status)
	v := e.get(p)
	require.Equal(t, payouts.StatusSucceeded, v.Status)
	require.Len(t, v.Attempts, 1)
	require.NotEmpty(t, v.Attempts[0].Events)
	av, res = e.balances()
	require.Equal(t, "70.00", av)
	require.Equal(t, "0.00", res)
	clearing, err := payouts.ClearingBalance(e.ctx, e.pool, "sim", brl("1").Currency())
	require.NoError(t, err)
	require.Equal(t, "30.00", clearing.StringFixed(2))
	require.Equal(t, 1, e.opsFor(a))
}

// R1, R14, R22: the provider recorded the transfer and then the connection
// hung past our read timeout. The attempt is unknown, the reserve holds, and
// a lookup by reference resolves it succeeded: one operation at the
// provider, one debit of the merchant.
func TestHangAfterRecordingResolvesByLookup(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{Faults: []sim.FaultRule{{Kind: sim.FaultHangAfter, Times: 1}}}, "100.00")
	p, err := e.svc.CreatePayout(e.ctx, e.pix("30.00"))
	require.NoError(t, err)

	a := e.execute(p)
	require.Equal(t, attempts.StatusUnknown, a.Status)
	require.Equal(t, payouts.StatusProcessing, e.get(p).Status)
	av, res := e.balances()
	require.Equal(t, "70.00", av, "unknown never frees the reserve (R22)")
	require.Equal(t, "30.00", res)

	// Not re-sent: executing again does not call the provider (R14).
	again := e.execute(p)
	require.Equal(t, attempts.StatusUnknown, again.Status)
	require.Equal(t, a.CallCount, again.CallCount)

	r := e.resolveAfter(p, 31*time.Second)
	require.True(t, r.Transitioned)
	require.Equal(t, attempts.StatusSucceeded, r.Attempt.Status)
	require.Equal(t, payouts.StatusSucceeded, e.get(p).Status)
	require.Equal(t, 1, e.opsFor(a), "exactly one operation at the provider")
	av, res = e.balances()
	require.Equal(t, "70.00", av, "debited once")
	require.Equal(t, "0.00", res)
}

// R2, R14: a 500 after the provider recorded the operation is unknown, and
// the same key would replay the 500, so it is resolved by lookup.
func TestErrorAfterRecordingResolvesByLookup(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{Faults: []sim.FaultRule{{Kind: sim.FaultErrorAfter, Times: 1}}}, "100.00")
	p, err := e.svc.CreatePayout(e.ctx, e.pix("12.34"))
	require.NoError(t, err)
	a := e.execute(p)
	require.Equal(t, attempts.StatusUnknown, a.Status)
	r := e.resolveAfter(p, 31*time.Second)
	require.Equal(t, attempts.StatusSucceeded, r.Attempt.Status)
	require.Equal(t, 1, e.opsFor(a))
	av, res := e.balances()
	require.Equal(t, "87.66", av)
	require.Equal(t, "0.00", res)
}

// R16: with lookup lag, "not found" is not proof of absence: the attempt
// stays unknown (reserve held) until the operation becomes visible.
func TestLookupLagKeepsUnknownUntilVisible(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{LookupLag: 3 * time.Minute,
		Faults: []sim.FaultRule{{Kind: sim.FaultHangAfter, Times: 1}}}, "100.00")
	p, err := e.svc.CreatePayout(e.ctx, e.pix("40.00"))
	require.NoError(t, err)
	a := e.execute(p)
	require.Equal(t, attempts.StatusUnknown, a.Status)

	r := e.resolveAfter(p, 31*time.Second) // invisible still
	require.False(t, r.Transitioned)
	require.Equal(t, attempts.StatusUnknown, r.Attempt.Status)
	av, res := e.balances()
	require.Equal(t, "60.00", av)
	require.Equal(t, "40.00", res)

	for i := 0; i < 10 && r.Attempt.Status == attempts.StatusUnknown; i++ {
		r = e.resolveAfter(p, r.RetryIn+time.Second)
	}
	require.Equal(t, attempts.StatusSucceeded, r.Attempt.Status)
	require.Equal(t, 1, e.opsFor(a))
}

// R16: a request the provider never processed (503) is unknown; only after
// the consistency window with nothing found does it resolve failed, and only
// then is the reserve released.
func TestNotFoundAfterWindowFailsAndReleases(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{LookupLag: time.Minute,
		Faults: []sim.FaultRule{{Kind: sim.FaultUnavailable, Times: 1}}}, "100.00")
	p, err := e.svc.CreatePayout(e.ctx, e.pix("25.00"))
	require.NoError(t, err)
	a := e.execute(p)
	require.Equal(t, attempts.StatusUnknown, a.Status)
	r := e.resolveAfter(p, 31*time.Second)
	require.Equal(t, attempts.StatusUnknown, r.Attempt.Status, "inside the consistency window")
	for i := 0; i < 10 && r.Attempt.Status == attempts.StatusUnknown; i++ {
		r = e.resolveAfter(p, r.RetryIn+time.Second)
	}
	require.Equal(t, attempts.StatusFailed, r.Attempt.Status)
	v := e.get(p)
	require.Equal(t, payouts.StatusFailed, v.Status)
	av, res := e.balances()
	require.Equal(t, "100.00", av, "released only once resolved failed")
	require.Equal(t, "0.00", res)
	require.Equal(t, 0, e.opsFor(a))
}

// A definitive decline fails the attempt, releases the reserve, and lets the
// caller retry with a NEW key (R6), which reserves again.
func TestDeclineReleasesAndRetryUsesNewKey(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{Balances: map[string]string{"BRL": "10.00"}}, "100.00")
	p, err := e.svc.CreatePayout(e.ctx, e.pix("50.00"))
	require.NoError(t, err)
	first := e.execute(p)
	require.Equal(t, attempts.StatusFailed, first.Status)
	v := e.get(p)
	require.Equal(t, payouts.StatusFailed, v.Status)
	require.NotEmpty(t, v.FailureReason)
	av, res := e.balances()
	require.Equal(t, "100.00", av)
	require.Equal(t, "0.00", res)

	_, err = e.svc.Retry(e.ctx, merchant, p.ID)
	require.NoError(t, err)
	p2, err := e.svc.Retry(e.ctx, merchant, p.ID)
	require.ErrorIs(t, err, payouts.ErrNotRetryable, "a processing payout is not retryable")
	p2 = e.get(p).Payout
	second := e.attempt(p2)
	require.NotEqual(t, first.IdempotencyKey, second.IdempotencyKey, "R6: new key after a definitive failure")
	require.NotEqual(t, first.Reference, second.Reference)
	av, res = e.balances()
	require.Equal(t, "50.00", av, "reserved again")
	require.Equal(t, "50.00", res)
	require.Equal(t, attempts.StatusFailed, e.execute(p2).Status)
	require.Equal(t, 2, e.get(p).AttemptCount)
}

// R23: 50 concurrent payouts whose sum exceeds the balance: exactly the
// affordable ones are accepted and the balance never goes negative.
func TestConcurrentPayoutsNeverOverdraw(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted, refused := 0, 0
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := e.pix("3.00")
			req.ClientKey = fmt.Sprintf("race-%d", i)
			_, err := e.svc.CreatePayout(e.ctx, req)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				accepted++
			case errors.Is(err, payouts.ErrInsufficientBalance):
				require.ErrorIs(t, err, ledger.ErrInsufficientFunds)
				refused++
			default:
				t.Errorf("unexpected error: %v", err)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 33, accepted)
	require.Equal(t, 17, refused)
	av, res := e.balances()
	require.Equal(t, "1.00", av)
	require.Equal(t, "99.00", res)
}

// R22: while a payout is unknown, a second payout that needs the same funds
// is refused.
func TestUnknownHoldsFunds(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{Faults: []sim.FaultRule{{Kind: sim.FaultHangAfter, Times: 1}}}, "100.00")
	p, err := e.svc.CreatePayout(e.ctx, e.pix("80.00"))
	require.NoError(t, err)
	require.Equal(t, attempts.StatusUnknown, e.execute(p).Status)
	_, err = e.svc.CreatePayout(e.ctx, e.pix("30.00"))
	require.ErrorIs(t, err, payouts.ErrInsufficientBalance)
	// Resolve so the test ends with nothing open.
	require.Equal(t, attempts.StatusSucceeded, e.resolveAfter(p, 31*time.Second).Attempt.Status)
	_, err = e.svc.CreatePayout(e.ctx, e.pix("30.00"))
	require.ErrorIs(t, err, payouts.ErrInsufficientBalance, "the 80.00 really left")
}

// Creation is idempotent for the caller: same key + same request returns
// the same payout; same key + different request is a typed conflict; 20
// concurrent identical requests create one payout.
func TestCreateIdempotentForCaller(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	req := e.pix("10.00")
	req.ClientKey = "order-42"
	var wg sync.WaitGroup
	ids := make([]string, 20)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := e.svc.CreatePayout(e.ctx, req)
			require.NoError(t, err)
			ids[i] = p.ID
		}()
	}
	wg.Wait()
	for _, id := range ids {
		require.Equal(t, ids[0], id)
	}
	av, _ := e.balances()
	require.Equal(t, "90.00", av, "reserved once")

	other := req
	other.Amount = brl("11.00")
	_, err := e.svc.CreatePayout(e.ctx, other)
	require.ErrorIs(t, err, payouts.ErrIdempotencyConflict)

	list, next, err := e.svc.List(e.ctx, payouts.ListParams{MerchantID: merchant})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Empty(t, next)
	// Settle so the audit sees a final state too.
	p := e.get(payouts.Payout{ID: ids[0]}).Payout
	require.Equal(t, attempts.StatusSucceeded, e.execute(p).Status)
}

func TestValidationNamesFieldAndWritesNothing(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	cases := map[string]payouts.PayoutRequest{
		"destination.pix_key.value": {MerchantID: merchant, Operation: providers.OpPixTransfer, Amount: brl("1.00"),
			Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "cpf", Value: "12345678900"}}},
		"amount":              {MerchantID: merchant, Operation: providers.OpPixTransfer, Amount: brl("0.00"), Destination: pixTo("a@b.co")},
		"operation":           {MerchantID: merchant, Operation: providers.OpRefund, Amount: brl("1.00"), Destination: pixTo("a@b.co")},
		"destination.pix_key": {MerchantID: merchant, Operation: providers.OpBankPayout, Amount: brl("1.00"), Destination: pixTo("a@b.co")},
	}
	for field, req := range cases {
		_, err := e.svc.CreatePayout(e.ctx, req)
		var fe *payouts.FieldError
		require.True(t, errors.As(err, &fe), "%s: %v", field, err)
		require.Equal(t, field, fe.Field)
	}
	_, err := e.svc.CreatePayout(e.ctx, payouts.PayoutRequest{MerchantID: "nobody", Operation: providers.OpPixTransfer,
		Amount: brl("1.00"), Destination: pixTo("a@b.co")})
	require.ErrorIs(t, err, payouts.ErrUnknownMerchant)
	list, _, err := e.svc.List(e.ctx, payouts.ListParams{MerchantID: merchant})
	require.NoError(t, err)
	require.Empty(t, list)
	av, _ := e.balances()
	require.Equal(t, "100.00", av)
}

func TestMerchantSeesOnlyOwnPayouts(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	_, err := merchants.Create(e.ctx, e.pool, "m2", "Other")
	require.NoError(t, err)
	p, err := e.svc.CreatePayout(e.ctx, e.pix("5.00"))
	require.NoError(t, err)
	_, err = e.svc.Get(e.ctx, "m2", p.ID)
	require.ErrorIs(t, err, payouts.ErrNotFound)
	_, err = e.svc.Retry(e.ctx, "m2", p.ID)
	require.ErrorIs(t, err, payouts.ErrNotFound)
	list, _, err := e.svc.List(e.ctx, payouts.ListParams{MerchantID: "m2"})
	require.NoError(t, err)
	require.Empty(t, list)
	e.execute(p)
}

// Split payouts: all legs reserved in one transaction or none; each leg has
// its own attempt and key; a failed leg releases only its own reserve; the
// split's status aggregates its legs.
func TestSplitPayout(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{Faults: []sim.FaultRule{{Kind: sim.FaultUnavailable, Operation: providers.OpBankPayout}}}, "100.00")
	acct := &providers.Destination{BankAccount: &providers.BankAccount{ISPB: "60701190", Branch: "1", Account: "12345", Type: "checking"}}
	legs := []payouts.SplitLeg{
		{Operation: providers.OpPixTransfer, Amount: brl("20.00"), Destination: pixTo("a@example.com")},
		{Operation: providers.OpPixTransfer, Amount: brl("30.00"), Destination: pixTo("b@example.com")},
		{Operation: providers.OpBankPayout, Amount: brl("10.00"), Destination: acct},
	}
	// Too much in total: nothing is reserved, nothing written.
	_, err := e.svc.CreateSplit(e.ctx, payouts.SplitRequest{MerchantID: merchant, Legs: append(legs,
		payouts.SplitLeg{Operation: providers.OpPixTransfer, Amount: brl("40.01"), Destination: pixTo("c@example.com")})})
	require.ErrorIs(t, err, payouts.ErrInsufficientBalance)
	av, res := e.balances()
	require.Equal(t, "100.00", av)
	require.Equal(t, "0.00", res)

	sp, err := e.svc.CreateSplit(e.ctx, payouts.SplitRequest{MerchantID: merchant, ClientKey: "split-1", Legs: legs})
	require.NoError(t, err)
	require.Len(t, sp.Legs, 3)
	require.Equal(t, "60.00 BRL", sp.Total.String())
	av, res = e.balances()
	require.Equal(t, "40.00", av)
	require.Equal(t, "60.00", res)
	keys := map[string]bool{}
	for _, l := range sp.Legs {
		keys[e.attempt(l).IdempotencyKey] = true
	}
	require.Len(t, keys, 3, "each leg has its own key")

	require.Equal(t, attempts.StatusSucceeded, e.execute(sp.Legs[0]).Status)
	require.Equal(t, attempts.StatusSucceeded, e.execute(sp.Legs[1]).Status)
	require.Equal(t, attempts.StatusUnknown, e.execute(sp.Legs[2]).Status) // 503: never processed
	got, err := e.svc.GetSplit(e.ctx, merchant, sp.ID)
	require.NoError(t, err)
	require.Equal(t, payouts.SplitProcessing, got.Status)
	leg := sp.Legs[2]
	r := e.resolveAfter(leg, 31*time.Second)
	for i := 0; i < 10 && r.Attempt.Status == attempts.StatusUnknown; i++ {
		r = e.resolveAfter(leg, r.RetryIn+time.Second)
	}
	require.Equal(t, attempts.StatusFailed, r.Attempt.Status)
	got, err = e.svc.GetSplit(e.ctx, merchant, sp.ID)
	require.NoError(t, err)
	require.Equal(t, payouts.SplitPartiallyFailed, got.Status)
	av, res = e.balances()
	require.Equal(t, "50.00", av, "only the failed leg's 10.00 came back")
	require.Equal(t, "0.00", res)

	again, err := e.svc.CreateSplit(e.ctx, payouts.SplitRequest{MerchantID: merchant, ClientKey: "split-1", Legs: legs})
	require.NoError(t, err)
	require.Equal(t, sp.ID, again.ID, "same client key, same split")
}

// TestPayoutsGuard: the database keeps a succeeded payout final and its
// money fields immutable against hand-written SQL; the guard's WHEN clause
// (migration 00031) lets ordinary updates through without it.
func TestPayoutsGuard(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	p, err := e.svc.CreatePayout(e.ctx, e.pix("10.00"))
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, e.execute(p).Status)
	exec := func(sql string) error {
		_, err := e.pool.Exec(e.ctx, sql, p.ID)
		return err
	}
	require.NoError(t, exec(`UPDATE payouts SET description = 'renamed' WHERE id = $1`), "an ordinary update passes")
	require.ErrorContains(t, exec(`UPDATE payouts SET status = 'failed' WHERE id = $1`), "status is final")
	require.ErrorContains(t, exec(`UPDATE payouts SET amount = 1 WHERE id = $1`), "immutable")
	require.ErrorContains(t, exec(`UPDATE payouts SET merchant_id = 'm2' WHERE id = $1`), "immutable")
	require.ErrorContains(t, exec(`DELETE FROM payouts WHERE id = $1`), "never deleted")
}

// R17: the amounts a lookup batch checks found reports against are the
// payouts' own, read for many attempts at once (attempts.AmountsOwner), and
// agree with AttemptAmount; an attempt whose payout is missing is an error,
// never a pass.
func TestAttemptAmountsReadsEveryPayout_R17(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	var as []attempts.Attempt
	for _, amt := range []string{"12.34", "0.01"} {
		p, err := e.svc.CreatePayout(e.ctx, e.pix(amt))
		require.NoError(t, err)
		as = append(as, e.attempt(p))
	}
	got, err := e.svc.AttemptAmounts(e.ctx, e.pool, as)
	require.NoError(t, err)
	require.Len(t, got, 2)
	for i, a := range as {
		amount, currency, err := e.svc.AttemptAmount(e.ctx, e.pool, a)
		require.NoError(t, err)
		require.True(t, amount.Equal(got[a.ID].Amount), "attempt %d", i)
		require.Equal(t, currency, got[a.ID].Currency)
	}
	require.Equal(t, "12.34", got[as[0].ID].Amount.StringFixed(2))

	ghost := as[0]
	ghost.ID, ghost.SubjectID = uuid.New(), "po_"+strings.Repeat("0", 32)
	_, err = e.svc.AttemptAmounts(e.ctx, e.pool, []attempts.Attempt{as[1], ghost})
	require.ErrorIs(t, err, pgx.ErrNoRows)
}

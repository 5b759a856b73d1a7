package payouts_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/internal/engine"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// addMerchant creates and funds one more merchant.
func (e *env) addMerchant(id, balance string) {
	e.t.Helper()
	_, err := merchants.Create(e.ctx, e.pool, id, "Loja "+id)
	require.NoError(e.t, err)
	_, err = merchants.Fund(e.ctx, e.pool, merchants.Funding{MerchantID: id, Amount: brl(balance),
		Key: "initial-" + id, Reason: "test funding", Actor: "test"})
	require.NoError(e.t, err)
}

// balancesOf returns (available, reserved) of a merchant in BRL.
func (e *env) balancesOf(merchantID string) (string, string) {
	e.t.Helper()
	b, err := ledger.MerchantBalanceIn(e.ctx, e.pool, merchantID, brl("1").Currency())
	require.NoError(e.t, err)
	return b.Available.StringFixed(2), b.Reserved.StringFixed(2)
}

func (e *env) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	require.NoError(e.t, e.pool.QueryRow(e.ctx, sql, args...).Scan(&n))
	return n
}

// runAll starts n calls of f at the same moment and waits for them.
func runAll(n int, f func(i int)) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			f(i)
		}()
	}
	close(start)
	wg.Wait()
}

// R22, decision 0002: concurrent CreatePayout calls across merchants share
// opening transactions. Every call gets its own payout, exactly as Get
// shows it, with one attempt, one "opened" event and one reserve, and the
// merchants' balances move by exactly their payouts. Batching happened:
// payouts written by one transaction share its xmin.
func TestCreatePayoutBatchedAcrossMerchants(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "1000.00")
	ms := []string{merchant, "m2", "m3", "m4"}
	for _, m := range ms[1:] {
		e.addMerchant(m, "1000.00")
	}
	const n = 40
	reqs := make([]payouts.PayoutRequest, n)
	for i := range reqs {
		reqs[i] = payouts.PayoutRequest{MerchantID: ms[i%len(ms)], Operation: providers.OpPixTransfer,
			Amount: brl(fmt.Sprintf("%d.%02d", i+1, i)), Destination: pixTo(fmt.Sprintf("p%d@example.com", i))}
		if i%2 == 0 {
			reqs[i].ClientKey = fmt.Sprintf("key-%d", i)
		}
		if i%3 == 0 {
			reqs[i].Description = fmt.Sprintf("payout %d", i)
			reqs[i].Metadata = map[string]string{"order": fmt.Sprint(i)}
		}
		if i%5 == 0 {
			reqs[i].Operation = providers.OpBankPayout
			reqs[i].Destination = &providers.Destination{BankAccount: &providers.BankAccount{
				ISPB: "60701190", Branch: "0001", Account: fmt.Sprintf("1234%d-6", i), Type: "checking"}}
		}
	}
	got := make([]payouts.Payout, n)
	errs := make([]error, n)
	runAll(n, func(i int) { got[i], errs[i] = e.svc.CreatePayout(e.ctx, reqs[i]) })

	ids := map[string]bool{}
	want := map[string]decimal.Decimal{}
	for i, p := range got {
		require.NoError(t, errs[i], "request %d", i)
		require.False(t, ids[p.ID], "payout id %s returned twice", p.ID)
		ids[p.ID] = true
		want[reqs[i].MerchantID] = want[reqs[i].MerchantID].Add(reqs[i].Amount.Decimal())

		v := e.getOf(reqs[i].MerchantID, p.ID)
		require.Equal(t, v.ID, p.ID)
		require.Equal(t, reqs[i].MerchantID, p.MerchantID)
		require.Equal(t, reqs[i].Amount.String(), p.Amount.String(), "request %d", i)
		require.Equal(t, v.Amount.String(), p.Amount.String())
		require.Equal(t, v.Kind, p.Kind)
		require.Equal(t, v.Operation, p.Operation)
		require.Equal(t, payouts.StatusProcessing, p.Status)
		require.Equal(t, payouts.StatusProcessing, v.Status)
		require.NotNil(t, p.CurrentAttemptID)
		require.Equal(t, v.CurrentAttemptID, p.CurrentAttemptID)
		require.Equal(t, 1, p.AttemptCount)
		require.Equal(t, 1, v.AttemptCount)
		require.Equal(t, v.Description, p.Description)
		require.Equal(t, v.Metadata, p.Metadata)
		require.Equal(t, v.Destination, p.Destination)
		require.True(t, v.CreatedAt.Equal(p.CreatedAt), "request %d: created_at %s returned, %s stored", i, p.CreatedAt, v.CreatedAt)
		require.Len(t, v.Attempts, 1)
		require.Equal(t, *p.CurrentAttemptID, v.Attempts[0].ID)
		require.Equal(t, attempts.StatusPending, v.Attempts[0].Status)
		require.Len(t, v.Attempts[0].Events, 1)
		require.Equal(t, attempts.EventOpened, v.Attempts[0].Events[0].Type)
		require.Equal(t, 1, e.count(`SELECT count(*) FROM ledger_transactions WHERE cause_kind = $1 AND cause_id = $2`,
			payouts.CauseReserve, p.CurrentAttemptID.String()), "request %d: one reserve (R22)", i)
		require.Equal(t, 1, e.count(`SELECT count(*) FROM river_job WHERE kind = $1 AND args->>'attempt_id' = $2`,
			attempts.SubmitAttemptKind, p.CurrentAttemptID.String()), "request %d: one submit job", i)
	}
	require.Equal(t, n, e.count(`SELECT count(*) FROM payouts`))
	require.Equal(t, n, e.count(`SELECT count(*) FROM attempts`))
	require.Equal(t, n, e.count(`SELECT count(*) FROM ledger_transactions WHERE cause_kind = $1`, payouts.CauseReserve))
	require.Equal(t, n/2, e.count(`SELECT count(*) FROM payout_requests`))
	for _, m := range ms {
		av, res := e.balancesOf(m)
		require.Equal(t, decimal.RequireFromString("1000").Sub(want[m]).StringFixed(2), av, m)
		require.Equal(t, want[m].StringFixed(2), res, m)
	}
	txs := e.count(`SELECT count(DISTINCT xmin::text) FROM payouts`)
	require.Less(t, txs, n, "no two payouts were created in one transaction: nothing was batched")
	t.Logf("%d payouts created in %d transactions", n, txs)
}

func (e *env) getOf(merchantID, id string) payouts.View {
	e.t.Helper()
	v, err := e.svc.Get(e.ctx, merchantID, id)
	require.NoError(e.t, err)
	return v
}

// A client key used by several concurrent callers (in one batch or in
// several): with the same request every caller gets the one payout; with
// different requests exactly one request wins, its callers get its payout
// and the others ErrIdempotencyConflict; nothing extra is written.
func TestCreatePayoutClientKeyRaces(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "1000.00")
	same := e.pix("10.00")
	same.ClientKey = "k-same"
	a, b := e.pix("20.00"), e.pix("21.00")
	a.ClientKey, b.ClientKey = "k-mixed", "k-mixed"
	const perKind = 8
	type answer struct {
		kind string
		p    payouts.Payout
		err  error
	}
	answers := make([]answer, 4*perKind)
	runAll(len(answers), func(i int) {
		var req payouts.PayoutRequest
		kind := []string{"same", "a", "b", "filler"}[i%4]
		switch kind {
		case "same":
			req = same
		case "a":
			req = a
		case "b":
			req = b
		default: // unrelated payouts in the same batches
			req = e.pix("1.00")
			req.ClientKey = fmt.Sprintf("filler-%d", i)
		}
		p, err := e.svc.CreatePayout(e.ctx, req)
		answers[i] = answer{kind, p, err}
	})

	sameIDs, winners := map[string]bool{}, map[string]map[string]bool{"a": {}, "b": {}}
	conflicts := map[string]int{}
	for _, ans := range answers {
		switch {
		case ans.kind == "same" || ans.kind == "filler":
			require.NoError(t, ans.err, ans.kind)
			if ans.kind == "same" {
				sameIDs[ans.p.ID] = true
			}
		case ans.err != nil:
			require.ErrorIs(t, ans.err, payouts.ErrIdempotencyConflict, ans.kind)
			conflicts[ans.kind]++
		default:
			winners[ans.kind][ans.p.ID] = true
		}
	}
	require.Len(t, sameIDs, 1, "same key, same request: one payout for every caller")
	// Exactly one of a and b won, and every caller of the winner got its payout.
	require.True(t, (len(winners["a"]) == 1 && conflicts["a"] == 0 && len(winners["b"]) == 0 && conflicts["b"] == perKind) ||
		(len(winners["b"]) == 1 && conflicts["b"] == 0 && len(winners["a"]) == 0 && conflicts["a"] == perKind),
		"winners %v conflicts %v", winners, conflicts)

	wantPayouts := 1 + 1 + perKind
	require.Equal(t, wantPayouts, e.count(`SELECT count(*) FROM payouts`))
	require.Equal(t, wantPayouts, e.count(`SELECT count(*) FROM ledger_transactions WHERE cause_kind = $1`, payouts.CauseReserve))
	require.Equal(t, wantPayouts, e.count(`SELECT count(*) FROM payout_requests`))
	mixedAmount := "20.00"
	if len(winners["b"]) == 1 {
		mixedAmount = "21.00"
	}
	av, res := e.balances()
	reserved := decimal.RequireFromString("10").Add(decimal.RequireFromString(mixedAmount)).Add(decimal.NewFromInt(perKind))
	require.Equal(t, reserved.StringFixed(2), res)
	require.Equal(t, decimal.RequireFromString("1000").Sub(reserved).StringFixed(2), av)

	// Later, the same key with another request: a conflict, nothing written.
	other := same
	other.Amount = brl("11.00")
	runAll(4, func(int) {
		_, err := e.svc.CreatePayout(e.ctx, other)
		assert.ErrorIs(t, err, payouts.ErrIdempotencyConflict)
	})
	require.Equal(t, wantPayouts, e.count(`SELECT count(*) FROM payouts`))
	av2, res2 := e.balances()
	require.Equal(t, []string{av, res}, []string{av2, res2})
}

// R23: 50 concurrent payouts of one merchant whose sum exceeds its balance,
// racing payouts of another merchant in the same batches: exactly the
// affordable count of the first is accepted (the others refused with
// ErrInsufficientBalance, matching ledger.ErrInsufficientFunds), every
// payout of the second is accepted, and no balance goes negative.
func TestCreatePayoutBatchesNeverOverdraw(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	e.addMerchant("rich", "1000.00")
	const poor, rich = 50, 20
	errs := make([]error, poor+rich)
	runAll(poor+rich, func(i int) {
		req := e.pix("7.00")
		req.ClientKey = fmt.Sprintf("race-%d", i)
		if i%((poor+rich)/rich) == 0 && i/((poor+rich)/rich) < rich {
			req.MerchantID = "rich"
		}
		_, errs[i] = e.svc.CreatePayout(e.ctx, req)
	})
	accepted, refused, richOK := 0, 0, 0
	for i, err := range errs {
		isRich := i%((poor+rich)/rich) == 0 && i/((poor+rich)/rich) < rich
		switch {
		case err == nil && isRich:
			richOK++
		case isRich:
			t.Errorf("rich merchant's payout %d refused: %v", i, err)
		case err == nil:
			accepted++
		case errors.Is(err, payouts.ErrInsufficientBalance):
			require.ErrorIs(t, err, ledger.ErrInsufficientFunds)
			refused++
		default:
			t.Errorf("payout %d: unexpected error %v", i, err)
		}
	}
	require.Equal(t, rich, richOK)
	require.Equal(t, 14, accepted, "100.00 affords fourteen payouts of 7.00")
	require.Equal(t, poor-14, refused)
	av, res := e.balances()
	require.Equal(t, "2.00", av)
	require.Equal(t, "98.00", res)
	av, res = e.balancesOf("rich")
	require.Equal(t, "860.00", av)
	require.Equal(t, "140.00", res)
	require.Equal(t, 14+rich, e.count(`SELECT count(*) FROM payouts`), "a refused payout writes nothing")
	require.Equal(t, 14+rich, e.count(`SELECT count(*) FROM payout_requests`), "a refused payout's key is not kept")
	require.Zero(t, e.count(`SELECT count(*) FROM ledger_accounts WHERE balance < 0 AND code LIKE 'merchant/%/available/%'`))
}

// End to end through River with the batched paths: 100 payouts of two
// merchants created concurrently, executed by 50 workers against the sim.
// Every payout succeeds, is settled once, the reserves go back to zero, the
// sim paid each reference once, the audit is clean, and some record
// transaction moved several attempts (their transition events share its
// xmin).
func TestPayoutsBatchedEndToEndThroughRiver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	srv := sim.NewServer(sim.Config{Seed: 11}).Start()
	t.Cleanup(srv.Close)
	prov := srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{ReadTimeout: 2 * time.Second}))
	eng, err := engine.New(engine.Config{
		Pool: pool, Providers: []providers.Provider{prov}, PayoutProvider: prov.Name(),
		RunWorkers: true, MaxWorkers: 50, FetchPollInterval: 10 * time.Millisecond,
		Attempts: attempts.Config{SendBackoffBase: 20 * time.Millisecond, SendBackoffMax: 100 * time.Millisecond,
			ResolveSchedule: []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}, StaleCallAfter: 10 * time.Second},
	})
	require.NoError(t, err)
	require.NoError(t, eng.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, eng.Stop(stopCtx))
	})
	ms := []string{"m1", "m2"}
	for _, m := range ms {
		_, err = merchants.Create(ctx, pool, m, "Loja "+m)
		require.NoError(t, err)
		_, err = merchants.Fund(ctx, pool, merchants.Funding{MerchantID: m, Amount: money.MustParse("1000.00", "BRL"),
			Key: "seed", Reason: "test", Actor: "test"})
		require.NoError(t, err)
	}
	const n = 100
	got := make([]payouts.Payout, n)
	errs := make([]error, n)
	runAll(n, func(i int) {
		got[i], errs[i] = eng.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: ms[i%2], ClientKey: fmt.Sprint(i),
			Operation: providers.OpPixTransfer, Amount: money.MustParse("3.00", "BRL"),
			Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: fmt.Sprintf("p%d@example.com", i)}}})
	})
	for i, err := range errs {
		require.NoError(t, err, "payout %d", i)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		left := 0
		for i, p := range got {
			v, err := eng.Payouts.Get(ctx, ms[i%2], p.ID)
			require.NoError(t, err)
			require.NotEqual(t, payouts.StatusFailed, v.Status, "payout %d failed", i)
			if v.Status != payouts.StatusSucceeded {
				left++
			}
		}
		if left == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "%d payouts still processing", left)
		time.Sleep(50 * time.Millisecond)
	}

	var count int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ledger_transactions WHERE cause_kind = $1`, payouts.CauseSettle).Scan(&count))
	require.Equal(t, n, count, "one settle per payout")
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ledger_transactions WHERE cause_kind = $1`, payouts.CauseRelease).Scan(&count))
	require.Zero(t, count)
	for _, m := range ms {
		b, err := ledger.MerchantBalanceIn(ctx, pool, m, money.MustParse("1", "BRL").Currency())
		require.NoError(t, err)
		require.Equal(t, "850.00", b.Available.StringFixed(2), m)
		require.Equal(t, "0.00", b.Reserved.StringFixed(2), m)
	}
	clearing, err := payouts.ClearingBalance(ctx, pool, prov.Name(), money.MustParse("1", "BRL").Currency())
	require.NoError(t, err)
	require.Equal(t, "300.00", clearing.StringFixed(2))
	for i, p := range got {
		a, err := eng.Attempts.Get(ctx, pool, *p.CurrentAttemptID)
		require.NoError(t, err)
		require.Len(t, srv.Operations(a.Reference), 1, "payout %d", i)
		require.Equal(t, 1, a.CallCount, "payout %d: one call (R12)", i)
	}
	require.Empty(t, srv.Duplicates())
	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())

	var opened, moved int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(DISTINCT xmin::text) FROM payouts`).Scan(&opened))
	require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(max(c), 0) FROM (SELECT count(*) AS c FROM attempt_events
		WHERE type = 'transition' AND to_status = 'succeeded' GROUP BY xmin::text) x`).Scan(&moved))
	t.Logf("largest record batch moved %d attempts", moved)
	require.Greater(t, moved, 1, "no record transaction moved several attempts: nothing was batched")
}

// AttemptsFinal (the BatchOwner path) has the effects AttemptFinal has one
// attempt at a time, for a mix in one transaction: a succeeded attempt
// (payout succeeded, reserve settled), a failed current attempt (payout
// failed with the attempt's failure, reserve released, R22), and a failed
// attempt that is no longer its payout's current one (payout row left as
// it is; its release posted once only, under its key). OnFinal sees the
// same payouts.
func TestAttemptsFinalMatchesAttemptFinal(t *testing.T) {
	t.Parallel()
	type outcome struct {
		Statuses   []payouts.Status
		Codes      []string
		Counts     []int
		CurrentIs  []string
		OnFinal    []string
		Available  string
		Reserved   string
		Clearing   string
		LedgerTxs  map[string]int
		AttemptsOK []attempts.Status
	}
	run := func(t *testing.T, together bool) outcome {
		e := setup(t, sim.Config{}, "100.00")
		var mu sync.Mutex
		var seen []string
		svc, err := payouts.New(payouts.Config{Pool: e.pool, Attempts: e.att, Provider: e.prov.Name(), Clock: e.clock,
			OnFinal: func(ctx context.Context, tx pgx.Tx, p payouts.Payout) error {
				mu.Lock()
				defer mu.Unlock()
				seen = append(seen, fmt.Sprintf("%s:%s:%s", p.ID, p.Status, p.FailureCode))
				return nil
			}})
		require.NoError(t, err)
		e.svc = svc

		declined := e.pix("30.00")
		declined.Destination = pixTo(sim.DeclinedPixKey)
		p1, err := svc.CreatePayout(e.ctx, e.pix("10.00"))
		require.NoError(t, err)
		p2, err := svc.CreatePayout(e.ctx, e.pix("20.00"))
		require.NoError(t, err)
		p3, err := svc.CreatePayout(e.ctx, declined)
		require.NoError(t, err)
		a3old := e.execute(p3) // declined: failed, payout failed, released
		require.Equal(t, attempts.StatusFailed, a3old.Status)
		p3, err = svc.Retry(e.ctx, merchant, p3.ID) // a new current attempt, reserved again
		require.NoError(t, err)
		mu.Lock()
		seen = nil
		mu.Unlock()

		require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
			// The attempts core's part, done by hand: the attempts moved in tx.
			now := e.clock.Now()
			_, err := tx.Exec(e.ctx, `UPDATE attempts SET status = 'succeeded', provider_state = 'succeeded',
				provider_id = 'op_test_1', resolved_at = $2, resolved_by = 'worker' WHERE id = $1`, *p1.CurrentAttemptID, now)
			require.NoError(t, err)
			_, err = tx.Exec(e.ctx, `UPDATE attempts SET status = 'failed', provider_state = 'failed',
				failure_code = 'pix_key_not_found', failure_reason = 'no such key', resolved_at = $2, resolved_by = 'worker'
				WHERE id = $1`, *p2.CurrentAttemptID, now)
			require.NoError(t, err)
			for id, to := range map[uuid.UUID]string{*p1.CurrentAttemptID: "succeeded", *p2.CurrentAttemptID: "failed"} {
				_, err = tx.Exec(e.ctx, `INSERT INTO attempt_events (attempt_id, at, type, actor, from_status, to_status, reason)
					VALUES ($1, $2, 'transition', 'worker', 'pending', $3, 'test')`, id, now, to)
				require.NoError(t, err)
			}
			var as []attempts.Attempt
			for _, id := range []uuid.UUID{*p1.CurrentAttemptID, *p2.CurrentAttemptID, a3old.ID} {
				a, err := e.att.Get(e.ctx, tx, id)
				require.NoError(t, err)
				as = append(as, a)
			}
			if together {
				// What the attempts core does: AttemptsFinal, then the
				// ledger postings it deferred.
				var postings ledger.Deferred
				if err := svc.AttemptsFinal(e.ctx, tx, as, &postings); err != nil {
					return err
				}
				return postings.Post(e.ctx, tx)
			}
			for _, a := range as {
				if err := svc.AttemptFinal(e.ctx, tx, a); err != nil {
					return err
				}
			}
			return nil
		}))

		var o outcome
		names := map[string]string{p1.ID: "p1", p2.ID: "p2", p3.ID: "p3"}
		for _, p := range []payouts.Payout{p1, p2, p3} {
			v := e.get(p)
			o.Statuses = append(o.Statuses, v.Status)
			o.Codes = append(o.Codes, v.FailureCode+"/"+v.FailureReason)
			o.Counts = append(o.Counts, v.AttemptCount)
			cur := "other"
			if *v.CurrentAttemptID == *p.CurrentAttemptID {
				cur = "same"
			}
			o.CurrentIs = append(o.CurrentIs, cur)
			a := e.attempt(v.Payout)
			o.AttemptsOK = append(o.AttemptsOK, a.Status)
		}
		mu.Lock()
		for _, s := range seen {
			o.OnFinal = append(o.OnFinal, names[s[:len(p1.ID)]]+s[len(p1.ID):])
		}
		mu.Unlock()
		o.Available, o.Reserved = e.balances()
		clearing, err := payouts.ClearingBalance(e.ctx, e.pool, e.prov.Name(), brl("1").Currency())
		require.NoError(t, err)
		o.Clearing = clearing.StringFixed(2)
		o.LedgerTxs = map[string]int{}
		rows, err := e.pool.Query(e.ctx, `SELECT cause_kind, count(*) FROM ledger_transactions GROUP BY cause_kind`)
		require.NoError(t, err)
		var kind string
		var c int
		_, err = pgx.ForEachRow(rows, []any{&kind, &c}, func() error { o.LedgerTxs[kind] = c; return nil })
		require.NoError(t, err)
		// Nothing left open but p3's new attempt, so the audit (run at
		// cleanup) sees reserved == open attempts; execute it to close.
		return o
	}
	var one, many outcome
	t.Run("one_at_a_time", func(t *testing.T) { one = run(t, false) })
	t.Run("together", func(t *testing.T) { many = run(t, true) })
	require.Equal(t, one, many)

	// And what that is (R22): p1 settled, p2 released and failed, p3 still
	// processing on its new attempt with 30.00 reserved again.
	require.Equal(t, []payouts.Status{payouts.StatusSucceeded, payouts.StatusFailed, payouts.StatusProcessing}, one.Statuses)
	require.Equal(t, []string{"/", "pix_key_not_found/no such key", "/"}, one.Codes)
	require.Equal(t, []int{1, 1, 2}, one.Counts)
	require.Equal(t, []string{"p1:succeeded:", "p2:failed:pix_key_not_found", "p3:processing:"}, one.OnFinal)
	require.Equal(t, "60.00", one.Available)
	require.Equal(t, "30.00", one.Reserved)
	require.Equal(t, "10.00", one.Clearing)
	require.Equal(t, 4, one.LedgerTxs[payouts.CauseReserve])
	require.Equal(t, 1, one.LedgerTxs[payouts.CauseSettle])
	require.Equal(t, 2, one.LedgerTxs[payouts.CauseRelease])
}

// A reserve the ledger refuses takes only its own request out of the
// batch (R23): the others still open together in one transaction, and the
// refused one is answered by a transaction of its own.
func TestRefusedReserveLeavesTheRestBatched(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	e.addMerchant("rich", "1000.00")
	req := func(m, amount string) payouts.PayoutRequest {
		r := e.pix(amount)
		r.MerchantID = m
		return r
	}
	ps, errs := e.svc.CreateTogether(e.ctx, []payouts.PayoutRequest{
		req("rich", "10.00"), req(merchant, "90.00"), req("rich", "10.00"), req(merchant, "20.00"), req("rich", "10.00"),
	})
	for i, err := range errs {
		if i == 3 {
			require.ErrorIs(t, err, payouts.ErrInsufficientBalance, "90.00 of 100.00 is reserved: 20.00 more is not there")
			continue
		}
		require.NoError(t, err, "request %d", i)
		require.Equal(t, payouts.StatusProcessing, ps[i].Status)
	}
	require.Equal(t, 1, e.count(`SELECT count(DISTINCT xmin::text) FROM payouts`), "the four affordable payouts opened in one transaction")
	require.Equal(t, 4, e.count(`SELECT count(*) FROM payouts`))
	av, res := e.balances()
	require.Equal(t, "10.00", av)
	require.Equal(t, "90.00", res)
	av, res = e.balancesOf("rich")
	require.Equal(t, "970.00", av)
	require.Equal(t, "30.00", res)
	st := e.svc.CreateStats()
	require.EqualValues(t, 1, st.Fallbacks, "one batch rolled back for the refused reserve")
}

package charges_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers/sim"
)

// Group commit (docs/decisions/0002): AttemptsFinal over a paid card charge,
// a paid Pix charge with splits and a fee, a declined card charge and an
// expired cob gives exactly what AttemptFinal one at a time gives: the same
// charge rows, the same credits (legs, metadata), balances and ledger
// transactions, the same final hook calls in the same order (R24), with
// OnFinal or with OnFinalMany; and a second call is refused with the same
// error (R9: a final charge never finishes again).
func TestAttemptsFinalMatchesAttemptFinal(t *testing.T) {
	t.Parallel()
	type credit struct {
		Legs        []string
		Description string
		Metadata    map[string]string
	}
	type outcome struct {
		Charges    []string
		Credits    map[string]credit
		Balances   map[string]string
		LedgerTxs  map[string]int
		OnFinal    []string
		HookCalls  int
		Again      string
		AttemptsOK []attempts.Status
	}
	type mode int
	const (
		oneAtATime mode = iota
		togetherOnFinal
		togetherOnFinalMany
	)
	run := func(t *testing.T, m mode) outcome {
		var mu sync.Mutex
		var seen []string
		calls := 0
		names := map[string]string{}
		note := func(c charges.Charge) {
			seen = append(seen, fmt.Sprintf("%s:%s:%s", names[c.ID], c.Status, c.FailureCode))
		}
		e := setup(t, sim.Config{}, opts{tune: func(c *charges.Config) {
			if m == togetherOnFinalMany {
				c.OnFinalMany = func(ctx context.Context, tx pgx.Tx, cs []charges.Charge) error {
					mu.Lock()
					defer mu.Unlock()
					calls++
					for _, c := range cs {
						note(c)
					}
					return nil
				}
				return
			}
			c.OnFinal = func(ctx context.Context, tx pgx.Tx, c charges.Charge) error {
				mu.Lock()
				defer mu.Unlock()
				calls++
				note(c)
				return nil
			}
		}})
		require.NoError(t, e.svc.SetFeeRule(e.ctx, merchant, money.BRL,
			charges.FeeRule{Percent: decimal.RequireFromString("2.5"), Fixed: decimal.RequireFromString("0.30")}))

		cardReq := e.card("100.00", "tok_visa")
		cardReq.Splits = []charges.SplitRule{
			{RecipientID: partner, Percent: decimal.RequireFromString("10")},
			{RecipientID: agent, Amount: decimal.RequireFromString("5.00")},
		}
		cardPaid := e.create(cardReq)
		pixReq := e.pix("50.00")
		pixReq.Splits = []charges.SplitRule{{RecipientID: partner, Percent: decimal.RequireFromString("33.3333")}}
		pixPaid := e.create(pixReq)
		cardDeclined := e.create(e.card("30.00", sim.TokenDecline))
		pixExpired := e.create(e.pix("20.00"))
		all := []charges.Charge{cardPaid, pixPaid, cardDeclined, pixExpired}
		for i, c := range all {
			names[c.ID] = []string{"card_paid", "pix_paid", "card_declined", "pix_expired"}[i]
		}
		// The cobs exist (their attempts wait, processing) and the charges
		// show them.
		for _, c := range []charges.Charge{pixPaid, pixExpired} {
			a := e.execute(c)
			require.Equal(t, attempts.StatusPending, a.Status)
			require.Equal(t, charges.StatusAwaitingPayment, e.get(c).Status)
		}

		ids := make([]uuid.UUID, len(all))
		for i, c := range all {
			ids[i] = *c.AttemptID
		}
		final := func(tx pgx.Tx) []attempts.Attempt {
			as := make([]attempts.Attempt, len(ids))
			for i, id := range ids {
				a, err := e.att.Get(e.ctx, tx, id)
				require.NoError(t, err)
				as[i] = a
			}
			return as
		}
		require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
			// The attempts core's part, done by hand: the attempts moved in tx.
			now := e.clock.Now()
			move := func(id uuid.UUID, to, by, pid, code, reason, data string) {
				_, err := tx.Exec(e.ctx, `UPDATE attempts SET status = $2, provider_state = $2, resolved_at = $3,
					resolved_by = $4, provider_id = COALESCE(provider_id, NULLIF($5::text, '')), failure_code = NULLIF($6::text, ''),
					failure_reason = NULLIF($7::text, ''),
					data = CASE WHEN $8::text = '' THEN data ELSE COALESCE(data, '{}'::jsonb) || $8::text::jsonb END
					WHERE id = $1`, id, to, now, by, pid, code, reason, data)
				require.NoError(t, err)
				_, err = tx.Exec(e.ctx, `INSERT INTO attempt_events (attempt_id, at, type, actor, from_status, to_status, reason)
					VALUES ($1, $2, 'transition', $3, 'pending', $4, 'test')`, id, now, by, to)
				require.NoError(t, err)
			}
			move(ids[0], "succeeded", "worker", "ch_test_1", "", "", "")
			move(ids[1], "succeeded", "webhook", "", "", "", `{"status": "CONCLUIDA"}`)
			move(ids[2], "failed", "worker", "", "generic_decline", "your card was declined", "")
			move(ids[3], "failed", "resolver", "", "cob_expired", "", `{"status": "EXPIRADA"}`)
			as := final(tx)
			if m != oneAtATime {
				return finalTogether(e, tx, as)
			}
			for _, a := range as {
				if err := e.svc.AttemptFinal(e.ctx, tx, a); err != nil {
					return err
				}
			}
			return nil
		}))

		var o outcome
		o.Credits = map[string]credit{}
		for _, c := range all {
			v := e.get(c)
			name := names[c.ID]
			o.Charges = append(o.Charges, fmt.Sprintf("%s %s %s/%s paid_by=%s provider_id=%t paid_at=%t pix=%t fee=%s net=%s",
				name, v.Status, v.FailureCode, v.FailureReason, v.PaidBy, v.ProviderID != "", v.PaidAt != nil,
				v.Pix != nil, v.Fee, v.MerchantNet))
			if v.CreditTransactionID == 0 {
				continue
			}
			tx, err := ledger.TransactionByID(e.ctx, e.pool, v.CreditTransactionID)
			require.NoError(t, err)
			require.Equal(t, charges.CauseCredit+":"+c.ID, tx.IdempotencyKey)
			cr := credit{Description: strings.ReplaceAll(strings.ReplaceAll(tx.Description, c.ID, name),
				c.AttemptID.String(), "attempt"), Metadata: tx.Metadata}
			for _, p := range tx.Postings {
				cr.Legs = append(cr.Legs, p.AccountCode+" "+p.Amount.StringFixed(2))
			}
			require.Equal(t, c.ID, cr.Metadata["charge_id"])
			require.Equal(t, c.AttemptID.String(), cr.Metadata["attempt_id"])
			for _, k := range []string{"charge_id", "attempt_id", "reference", "provider_id"} {
				if cr.Metadata[k] != "" {
					cr.Metadata[k] = "set"
				}
			}
			o.Credits[name] = cr
		}
		o.Balances = map[string]string{}
		for _, spec := range []ledger.AccountSpec{ledger.MerchantAvailable(merchant, money.BRL),
			ledger.MerchantAvailable(partner, money.BRL), ledger.MerchantAvailable(agent, money.BRL),
			ledger.PlatformFees(money.BRL), ledger.ProviderClearing("sim", money.BRL)} {
			o.Balances[spec.Code()] = e.balance(spec)
		}
		o.LedgerTxs = map[string]int{}
		rows, err := e.pool.Query(e.ctx, `SELECT cause_kind, count(*) FROM ledger_transactions GROUP BY cause_kind`)
		require.NoError(t, err)
		var kind string
		var n int
		_, err = pgx.ForEachRow(rows, []any{&kind, &n}, func() error { o.LedgerTxs[kind] = n; return nil })
		require.NoError(t, err)
		for _, id := range ids {
			a, err := e.att.Get(e.ctx, e.pool, id)
			require.NoError(t, err)
			o.AttemptsOK = append(o.AttemptsOK, a.Status)
		}
		mu.Lock()
		o.OnFinal, o.HookCalls = seen, calls
		mu.Unlock()

		// Again, in a transaction that rolls back: refused, with the error
		// of the first attempt.
		err = pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
			as := final(tx)
			if m != oneAtATime {
				return finalTogether(e, tx, as)
			}
			return e.svc.AttemptFinal(e.ctx, tx, as[0])
		})
		require.Error(t, err)
		o.Again = strings.ReplaceAll(strings.ReplaceAll(err.Error(), cardPaid.ID, "card_paid"), ids[0].String(), "attempt")
		return o
	}
	var one, together, many outcome
	t.Run("one_at_a_time", func(t *testing.T) { one = run(t, oneAtATime) })
	t.Run("together_on_final", func(t *testing.T) { together = run(t, togetherOnFinal) })
	t.Run("together_on_final_many", func(t *testing.T) { many = run(t, togetherOnFinalMany) })
	require.Equal(t, one, together)
	require.Equal(t, 1, many.HookCalls, "OnFinalMany is called once for the batch")
	many.HookCalls = one.HookCalls
	require.Equal(t, one, many)

	// And what that is.
	require.Equal(t, []string{
		"card_paid paid / paid_by=worker provider_id=true paid_at=true pix=false fee=2.80 BRL net=82.48 BRL",
		"pix_paid paid / paid_by=webhook provider_id=true paid_at=true pix=true fee=1.55 BRL net=32.31 BRL",
		"card_declined failed generic_decline/your card was declined paid_by= provider_id=false paid_at=false pix=false fee=1.05 BRL net=28.95 BRL",
		"pix_expired expired cob_expired/ paid_by= provider_id=true paid_at=false pix=true fee=0.80 BRL net=19.20 BRL",
	}, one.Charges)
	require.Equal(t, []string{"card_paid:paid:", "pix_paid:paid:", "card_declined:failed:generic_decline",
		"pix_expired:expired:cob_expired"}, one.OnFinal)
	require.Equal(t, 4, one.HookCalls)
	require.Len(t, one.Credits, 2)
	require.Len(t, one.Credits["card_paid"].Legs, 5)
	require.Equal(t, []string{"provider/sim/clearing/BRL -50.00", "merchant/m1/available/BRL 32.31",
		"platform/main/fees/BRL 1.55", "merchant/m2/available/BRL 16.14"}, one.Credits["pix_paid"].Legs,
		"48.45 net x 33.3333% = 16.1498 -> 16.14 to the partner, the rest to the merchant")
	require.Equal(t, map[string]int{charges.CauseCredit: 2}, one.LedgerTxs)
	require.Equal(t, "-150.00", one.Balances[ledger.ProviderClearing("sim", money.BRL).Code()])
	require.Equal(t, []attempts.Status{attempts.StatusSucceeded, attempts.StatusSucceeded, attempts.StatusFailed,
		attempts.StatusFailed}, one.AttemptsOK)
	require.Contains(t, one.Again, "charge card_paid is paid; its attempt attempt cannot finish again")
}

// R9-R11 end to end: 50 card charges executed at once (attempts.Execute
// from 50 goroutines, the sim over HTTP) are all captured and credited
// exactly once, and their record phases were group-committed: at least one
// record transaction moved several attempts, marked their charges paid and
// posted their credits (the rows share its xmin), with no batch redone one
// by one. The audit and the sim oracle (no reference charged twice) run at
// cleanup.
func TestConcurrentCardChargesCreditedTogether(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, opts{readTimeout: 10 * time.Second})
	require.NoError(t, e.svc.SetFeeRule(e.ctx, merchant, money.BRL,
		charges.FeeRule{Percent: decimal.RequireFromString("2"), Fixed: decimal.Zero}))
	const n = 50
	cs := make([]charges.Charge, n)
	for i := range cs {
		req := e.card("10.00", "tok_visa")
		req.Splits = []charges.SplitRule{{RecipientID: partner, Amount: decimal.RequireFromString("1.00")}}
		cs[i] = e.create(req)
	}
	var wg sync.WaitGroup
	var failed atomic.Int64
	start := make(chan struct{})
	for _, c := range cs {
		wg.Go(func() {
			<-start
			res, err := e.att.Execute(e.ctx, *c.AttemptID)
			if err != nil || res.Attempt.Status != attempts.StatusSucceeded {
				failed.Add(1)
				t.Errorf("charge %s: %v (attempt %s)", c.ID, err, res.Attempt.Status)
			}
		})
	}
	close(start)
	wg.Wait()
	require.Zero(t, failed.Load())

	for _, c := range cs {
		got := e.get(c)
		require.Equal(t, charges.StatusPaid, got.Status)
		require.Equal(t, "worker", got.PaidBy)
		require.Equal(t, 1, e.credits(c), "credited once (R10)")
		require.Equal(t, 1, e.moneyMoving(got.Reference), "charged once at the provider")
	}
	require.Equal(t, "440.00", e.available(merchant, money.BRL), "50 x (10.00 - 0.20 fee - 1.00 split)")
	require.Equal(t, "50.00", e.available(partner, money.BRL))
	require.Equal(t, "10.00", e.balance(ledger.PlatformFees(money.BRL)))
	require.Equal(t, "-500.00", e.balance(ledger.ProviderClearing("sim", money.BRL)))

	// Each credit commits with its charge's paid mark and its attempt's
	// success: one transaction (same xmin).
	var apart int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM charges c
		JOIN ledger_transactions t ON t.id = c.credit_tx_id
		JOIN attempts a ON a.id = c.attempt_id
		WHERE c.xmin::text <> t.xmin::text OR a.xmin::text <> t.xmin::text`).Scan(&apart))
	require.Zero(t, apart, "credit, paid mark and attempt success commit together")
	var recordTxs, most int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*), max(n) FROM (SELECT count(*) AS n
		FROM ledger_transactions WHERE cause_kind = $1 GROUP BY xmin::text) x`, charges.CauseCredit).Scan(&recordTxs, &most))
	t.Logf("%d credits in %d record transactions (at most %d in one); record batches %+v",
		n, recordTxs, most, e.att.BatchStats().Records)
	require.Greater(t, most, 1, "a record transaction credited several charges")
	require.Less(t, recordTxs, n)
	require.Zero(t, e.att.BatchStats().Records.Fallbacks, "no record batch was redone one by one")
}

// BenchmarkChargeEndToEnd measures a card charge's create + one provider
// call + record (credit), sequentially, with the sim over local HTTP.
func BenchmarkChargeEndToEnd(b *testing.B) {
	e := setup(b, sim.Config{}, opts{readTimeout: 10 * time.Second})
	b.ResetTimer()
	for range b.N {
		c, err := e.svc.Create(e.ctx, e.card("0.01", "tok_visa"))
		require.NoError(b, err)
		_, err = e.att.Execute(e.ctx, *c.AttemptID)
		require.NoError(b, err)
	}
}

// BenchmarkChargeEndToEndParallel is BenchmarkChargeEndToEnd with 16
// callers per core: first sends and records are group-committed, and the
// credits of a record batch are posted by one ledger.PostMany (compare
// ns/op with BenchmarkChargeEndToEnd, measured in the same run).
func BenchmarkChargeEndToEndParallel(b *testing.B) {
	e := setup(b, sim.Config{}, opts{readTimeout: 10 * time.Second})
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c, err := e.svc.Create(e.ctx, e.card("0.01", "tok_visa"))
			if err == nil {
				_, err = e.att.Execute(e.ctx, *c.AttemptID)
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(e.att.BatchStats().Records.PerBatch(), "attempts/record")
}

// finalTogether is what the attempts core does with charges' final attempts
// recorded together: AttemptsFinal, then the ledger postings it deferred.
func finalTogether(e *env, tx pgx.Tx, as []attempts.Attempt) error {
	var postings ledger.Deferred
	if err := e.svc.AttemptsFinal(e.ctx, tx, as, &postings); err != nil {
		return err
	}
	return postings.Post(e.ctx, tx)
}

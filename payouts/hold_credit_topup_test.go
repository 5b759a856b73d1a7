package payouts_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/holds"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// partner is the split recipient of the credit top-up tests.
const partner = "m2"

// creditEnv is setup (m1 funded with 500.00) with charges, a split
// recipient m2, and a paid card charge of m1 of 100.00 (no fee) whose
// split gives m2 40.00 (m1 keeps 60.00).
func creditEnv(t *testing.T) (*env, *charges.Service, charges.Charge) {
	t.Helper()
	e := setup(t, sim.Config{}, "500.00")
	ch, err := charges.New(charges.Config{Pool: e.pool, Attempts: e.att, Provider: e.prov.Name(), Clock: e.clock})
	require.NoError(t, err)
	e.svc, err = payouts.New(payouts.Config{Pool: e.pool, Attempts: e.att, Provider: e.prov.Name(), Clock: e.clock, Charges: ch})
	require.NoError(t, err)
	_, err = merchants.Create(e.ctx, e.pool, partner, "Parceiro")
	require.NoError(t, err)
	req := charges.ChargeRequest{MerchantID: merchant, Kind: charges.KindCard, Amount: brl("100.00"), CardToken: "tok_visa",
		Splits: []charges.SplitRule{{RecipientID: partner, Amount: decimal.RequireFromString("40.00")}}}
	c := e.paidCharge(ch, req)
	require.Equal(t, "60.00", c.MerchantNet.Decimal().StringFixed(2))
	return e, ch, c
}

// paidCharge creates the charge and executes its attempt: succeeded, the
// charge paid and credited (a record batch of one: AttemptsFinal).
func (e *env) paidCharge(ch *charges.Service, req charges.ChargeRequest) charges.Charge {
	e.t.Helper()
	c, err := ch.Create(e.ctx, req)
	require.NoError(e.t, err)
	res, err := e.att.Execute(e.ctx, *c.AttemptID)
	require.NoError(e.t, err)
	require.Equal(e.t, attempts.StatusSucceeded, res.Attempt.Status)
	c, err = ch.Get(e.ctx, req.MerchantID, c.ID)
	require.NoError(e.t, err)
	require.Equal(e.t, charges.StatusPaid, c.Status)
	return c
}

// paidOut pays amount out of m's available balance (a payout that
// succeeds: the money is gone).
func (e *env) paidOut(m, amount string) {
	e.t.Helper()
	p, err := e.svc.CreatePayout(e.ctx, payouts.PayoutRequest{MerchantID: m, Operation: providers.OpPixTransfer,
		Amount: brl(amount), Destination: pixTo("joao@example.com")})
	require.NoError(e.t, err)
	require.Equal(e.t, attempts.StatusSucceeded, e.execute(p).Status)
}

// shortDispute: creditEnv, then m1 pays out 550.00 of its 560.00 and m2
// 35.00 of its 40.00, and the charge is disputed: its hold takes what is
// left (10.00 of m1's 60.00, 5.00 of m2's 40.00), short by 50.00 and
// 35.00.
func shortDispute(t *testing.T) (*env, *charges.Service, attempts.Attempt) {
	t.Helper()
	e, ch, c := creditEnv(t)
	e.paidOut(merchant, "550.00")
	e.paidOut(partner, "35.00")
	ca := e.disputeCharge(c)
	e.requireBRL(merchant, "0.00", "10.00")
	e.requireBRL(partner, "0.00", "5.00")
	e.requireHoldsClean()
	return e, ch, ca
}

// requireBRL asserts m's available and held balances in BRL.
func (e *env) requireBRL(m, available, held string) {
	e.t.Helper()
	b, err := ledger.MerchantBalanceIn(e.ctx, e.pool, m, money.BRL)
	require.NoError(e.t, err)
	require.Equal(e.t, available+" available, "+held+" held", b.Available.StringFixed(2)+" available, "+b.Held.StringFixed(2)+" held", m)
}

func (e *env) fund(m string, amount money.Amount, key string) ledger.Transaction {
	e.t.Helper()
	tx, err := merchants.Fund(e.ctx, e.pool, merchants.Funding{MerchantID: m, Amount: amount, Key: key,
		Reason: "funding " + key, Actor: "test"})
	require.NoError(e.t, err)
	return tx
}

// topUps are the divergence_hold transactions of the diverged attempt
// after its hold at the divergence (key divergence_hold:<id>:<credit>).
func (e *env) topUps(diverged uuid.UUID) []ledger.Transaction {
	e.t.Helper()
	rows, err := e.pool.Query(e.ctx, `SELECT id FROM ledger_transactions WHERE cause_kind = $1 AND cause_id = $2
		AND idempotency_key LIKE $3 ORDER BY id`, holds.CauseHold, diverged.String(), holds.CauseHold+":"+diverged.String()+":%")
	require.NoError(e.t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(e.t, err)
	var out []ledger.Transaction
	for _, id := range ids {
		tx, err := ledger.TransactionByID(e.ctx, e.pool, id)
		require.NoError(e.t, err)
		out = append(out, tx)
	}
	return out
}

// requireOneTransaction: the ledger transactions ids committed in one
// database transaction.
func (e *env) requireOneTransaction(ids ...int64) {
	e.t.Helper()
	require.Equal(e.t, 1, e.count(`SELECT count(DISTINCT xmin::text) FROM ledger_transactions WHERE id = ANY ($1::bigint[])`, ids))
}

// R9, R21, R22: a dispute's hold is short because the merchants paid most
// of the disputed money out (m1 holds 10.00 of its 60.00, the split
// recipient m2 5.00 of its 40.00). A funding of m1 now tops the hold up
// in the funding's own transaction (key divergence_hold:<charge attempt>:
// <the funding's ledger key>), and available shows only what the hold
// leaves; a second funding fills it and the rest stays available. A
// replay of the first funding's key tops up nothing twice; a funding in
// another currency does not touch it; a funding of the split recipient
// tops up its share. The settlement releases exactly what is held. Before,
// a funding credited available and the shortfall stayed for the operator
// while the merchant could pay the money in doubt out. Audit clean.
func TestFundingTopsUpAShortDisputeHold_R9_R21_R22(t *testing.T) {
	t.Parallel()
	e, _, ca := shortDispute(t)

	f1 := e.fund(merchant, brl("30.00"), "f1")
	e.requireBRL(merchant, "0.00", "40.00")
	ups := e.topUps(ca.ID)
	require.Len(t, ups, 1)
	require.Equal(t, holds.CauseHold+":"+ca.ID.String()+":funding:"+merchant+":f1", ups[0].IdempotencyKey)
	require.Equal(t, string(holds.CreditFunding), ups[0].Metadata["topped_up_by"])
	require.Equal(t, "100", ups[0].Metadata["wanted"], "the dispute's shares of m1 and m2")
	require.Equal(t, "45", ups[0].Metadata["held"])
	require.Equal(t, "55", ups[0].Metadata["shortfall"], "m1 still short by 20.00, m2 by 35.00")
	e.requireOneTransaction(f1.ID, ups[0].ID)
	e.requireHoldsClean()

	// A key too long to follow divergence_hold:<attempt id>: in the
	// ledger's 255 bytes is hashed in the top-up's key.
	long := strings.Repeat("k", 200)
	f2 := e.fund(merchant, brl("100.00"), long)
	e.requireBRL(merchant, "80.00", "60.00")
	ups = e.topUps(ca.ID)
	require.Len(t, ups, 2)
	require.Equal(t, holds.CauseHold+":"+ca.ID.String()+":"+holds.FundingBy("funding:"+merchant+":"+long), ups[1].IdempotencyKey)
	require.Contains(t, ups[1].IdempotencyKey, ":funding-sha256:")
	e.requireOneTransaction(f2.ID, ups[1].ID)
	e.requireHoldsClean()

	// The same funding again (same key, amount, reason): the original, and
	// nothing topped up twice.
	again := e.fund(merchant, brl("30.00"), "f1")
	require.True(t, again.Replayed)
	require.Equal(t, f1.ID, again.ID)
	e.requireBRL(merchant, "80.00", "60.00")
	require.Len(t, e.topUps(ca.ID), 2)

	// Another currency: the dispute wants BRL; USD stays available.
	e.fund(merchant, money.MustParse("10.00", "USD"), "f-usd")
	e.requireBRL(merchant, "80.00", "60.00")
	usd, err := ledger.MerchantBalanceIn(e.ctx, e.pool, merchant, money.MustParse("1", "USD").Currency())
	require.NoError(t, err)
	require.Equal(t, "10.00 available, 0.00 held", usd.Available.StringFixed(2)+" available, "+usd.Held.StringFixed(2)+" held")
	require.Len(t, e.topUps(ca.ID), 2)

	// The split recipient's funding tops up its share (35.00 short).
	e.fund(partner, brl("50.00"), "p1")
	e.requireBRL(partner, "15.00", "40.00")
	require.Len(t, e.topUps(ca.ID), 3)
	e.requireHoldsClean()

	settled, err := e.att.SettleDivergence(e.ctx, ca.ID, "op-1", "dispute won", attempts.HoldRelease)
	require.NoError(t, err)
	require.Contains(t, settled.DivergenceSettlement, "60.00 BRL of merchant "+merchant)
	require.Contains(t, settled.DivergenceSettlement, "40.00 BRL of merchant "+partner)
	require.NotContains(t, settled.DivergenceSettlement, "short")
	e.requireBRL(merchant, "140.00", "0.00")
	e.requireBRL(partner, "55.00", "0.00")
	e.requireHoldsClean()
}

// R9, R21, R22: the same short dispute; new charges' credits top it up in
// the transaction that records their success. One by one: a card charge
// of m1 resolved by the provider's webhook (the attempts core's
// transition, AttemptFinal). Batched: two charges recorded together
// (AttemptsFinal, one PostMany), one of them split with m2: one top-up
// for the dispute covers both merchants, m2's from its share. The
// settlement then books exactly what is held. Audit clean.
func TestChargeCreditsTopUpAShortDisputeHold_R9_R21_R22(t *testing.T) {
	t.Parallel()
	e, ch, ca := shortDispute(t)

	// One by one: the card charge of 30.00 is in flight (a 503), then a
	// webhook says it captured.
	c1, err := ch.Create(e.ctx, charges.ChargeRequest{MerchantID: merchant, Kind: charges.KindCard, Amount: brl("30.00"), CardToken: "tok_visa"})
	require.NoError(t, err)
	a1, err := e.att.Get(e.ctx, e.pool, *c1.AttemptID)
	require.NoError(t, err)
	require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: a1.Reference}))
	res, err := e.att.Execute(e.ctx, a1.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusUnknown, res.Attempt.Status)
	_, err = e.att.ResolveByReference(e.ctx, attempts.ResolveInput{Reference: a1.Reference, Provider: a1.Provider,
		Operation: providers.Operation(a1.Operation), Amount: "30.00", Currency: "BRL", State: providers.StateSucceeded,
		ProviderID: "ch_webhook_1", Source: attempts.SourceWebhook, Actor: "evt_capture_1"})
	require.NoError(t, err)
	c1, err = ch.Get(e.ctx, merchant, c1.ID)
	require.NoError(t, err)
	require.Equal(t, charges.StatusPaid, c1.Status)
	e.requireBRL(merchant, "0.00", "40.00")
	ups := e.topUps(ca.ID)
	require.Len(t, ups, 1)
	require.Equal(t, holds.CauseHold+":"+ca.ID.String()+":"+a1.ID.String(), ups[0].IdempotencyKey)
	require.Equal(t, a1.ID.String(), ups[0].Metadata["credited_by_attempt"])
	e.requireOneTransaction(c1.CreditTransactionID, ups[0].ID)
	e.requireHoldsClean()

	// Batched: m1 15.00; m1 50.00 split 30.00 to m2 (m1 keeps 20.00).
	b1, err := ch.Create(e.ctx, charges.ChargeRequest{MerchantID: merchant, Kind: charges.KindCard, Amount: brl("15.00"), CardToken: "tok_visa"})
	require.NoError(t, err)
	b2, err := ch.Create(e.ctx, charges.ChargeRequest{MerchantID: merchant, Kind: charges.KindCard, Amount: brl("50.00"), CardToken: "tok_visa",
		Splits: []charges.SplitRule{{RecipientID: partner, Amount: decimal.RequireFromString("30.00")}}})
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		// The attempts core's part, done by hand: both attempts succeeded
		// in tx, handed to the owner together.
		var as []attempts.Attempt
		for i, c := range []charges.Charge{b1, b2} {
			_, err := tx.Exec(e.ctx, `UPDATE attempts SET status = 'succeeded', provider_state = 'succeeded', resolved_at = $2,
				resolved_by = 'worker', provider_id = $3 WHERE id = $1`, *c.AttemptID, e.clock.Now(), fmt.Sprintf("ch_batch_%d", i))
			require.NoError(t, err)
			_, err = tx.Exec(e.ctx, `INSERT INTO attempt_events (attempt_id, at, type, actor, from_status, to_status, reason)
				VALUES ($1, $2, 'transition', 'worker', 'pending', 'succeeded', 'test')`, *c.AttemptID, e.clock.Now())
			require.NoError(t, err)
			a, err := e.att.Get(e.ctx, tx, *c.AttemptID)
			require.NoError(t, err)
			as = append(as, a)
		}
		var postings ledger.Deferred
		if err := ch.AttemptsFinal(e.ctx, tx, as, &postings); err != nil {
			return err
		}
		return postings.Post(e.ctx, tx)
	}))
	e.requireBRL(merchant, "15.00", "60.00")
	e.requireBRL(partner, "0.00", "35.00")
	ups = e.topUps(ca.ID)
	require.Len(t, ups, 2, "one top-up of the dispute for the batch, both merchants in it")
	require.Contains(t, []string{holds.CauseHold + ":" + ca.ID.String() + ":" + b1.AttemptID.String(),
		holds.CauseHold + ":" + ca.ID.String() + ":" + b2.AttemptID.String()}, ups[1].IdempotencyKey)
	require.Len(t, ups[1].Postings, 4)
	b1, err = ch.Get(e.ctx, merchant, b1.ID)
	require.NoError(t, err)
	b2, err = ch.Get(e.ctx, merchant, b2.ID)
	require.NoError(t, err)
	e.requireOneTransaction(b1.CreditTransactionID, b2.CreditTransactionID, ups[1].ID)
	e.requireHoldsClean()

	before, err := ledger.Balance(e.ctx, e.pool, ledger.ProviderClearing(e.prov.Name(), money.BRL).Code())
	require.NoError(t, err)
	settled, err := e.att.SettleDivergence(e.ctx, ca.ID, "op-1", "dispute lost", attempts.HoldBook)
	require.NoError(t, err)
	require.Contains(t, settled.DivergenceSettlement, "short of what was in doubt by 5.00 BRL of merchant "+partner)
	after, err := ledger.Balance(e.ctx, e.pool, ledger.ProviderClearing(e.prov.Name(), money.BRL).Code())
	require.NoError(t, err)
	require.Equal(t, "95.00", after.Decimal().Sub(before.Decimal()).StringFixed(2), "book moves exactly what is held")
	e.requireBRL(merchant, "15.00", "0.00")
	e.requireBRL(partner, "0.00", "0.00")
	e.requireHoldsClean()
}

// R9, R21, R22, R23: one merchant; while its charge is disputed (the hold
// short: most of the money paid out), fundings (two of them with one key),
// card charges executed at the same time (record batches) and a failing
// payout's release credit its available balance. Nothing surfaces a
// deadlock or any error to a caller, the repeated key posts once, the
// holds' audit stays clean throughout (held never above wanted), and
// once it is over one more funding fills whatever is still short:
// held == wanted. Full audit clean after the settlement.
func TestCreditsRacingADisputeHold_R9_R21_R22_R23(t *testing.T) {
	t.Parallel()
	e, ch, c := creditEnv(t)
	e.paidOut(merchant, "530.00")
	e.paidOut(partner, "35.00")
	inflight, err := e.svc.CreatePayout(e.ctx, e.pix("20.00"))
	require.NoError(t, err)
	require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: e.attempt(inflight).Reference}))
	require.Equal(t, attempts.StatusUnknown, e.execute(inflight).Status)
	e.requireBRL(merchant, "10.00", "0.00")
	e.clock.Advance(time.Hour) // the in-flight payout's lookup may fail it
	ca, err := e.att.Get(e.ctx, e.pool, *c.AttemptID)
	require.NoError(t, err)

	const fundings, chargesN = 10, 8
	var mu sync.Mutex
	var errs []string
	fail := func(what string, err error) {
		if err != nil {
			mu.Lock()
			errs = append(errs, what+": "+err.Error())
			mu.Unlock()
		}
	}
	done := make(chan struct{})
	var watch sync.WaitGroup
	watch.Add(1)
	var over []string
	go func() {
		defer watch.Done()
		for {
			vs, err := holds.Verify(e.ctx, e.pool)
			fail("verify", err)
			for _, v := range vs {
				over = append(over, v.String())
			}
			select {
			case <-done:
				return
			default:
			}
		}
	}()
	var dupIDs [2]int64
	runAll(1+fundings+2+chargesN+1, func(i int) {
		switch {
		case i == 0:
			// Some credits commit before the dispute, others with it or
			// after.
			time.Sleep(15 * time.Millisecond)
			res, err := e.att.RecordDispute(e.ctx, attempts.DisputeReport{Provider: ca.Provider, ProviderID: ca.ProviderID,
				EventID: "evt_dp_race", DisputeID: "dp_race", Withdrawn: true, Note: "dispute dp_race: funds withdrawn"})
			fail("dispute", err)
			if err == nil && !res.Diverged {
				fail("dispute", fmt.Errorf("not diverged"))
			}
		case i <= fundings:
			_, err := merchants.Fund(e.ctx, e.pool, merchants.Funding{MerchantID: merchant, Amount: brl("4.00"),
				Key: fmt.Sprintf("race-%d", i), Reason: "race", Actor: "test"})
			fail("funding", err)
		case i <= fundings+2:
			tx, err := merchants.Fund(e.ctx, e.pool, merchants.Funding{MerchantID: merchant, Amount: brl("3.00"),
				Key: "race-dup", Reason: "race dup", Actor: "test"})
			fail("funding dup", err)
			dupIDs[i-fundings-1] = tx.ID
		case i <= fundings+2+chargesN:
			req := charges.ChargeRequest{MerchantID: merchant, Kind: charges.KindCard, Amount: brl("5.00"), CardToken: "tok_visa"}
			if i%2 == 0 {
				req.Splits = []charges.SplitRule{{RecipientID: partner, Amount: decimal.RequireFromString("2.00")}}
			}
			cc, err := ch.Create(e.ctx, req)
			fail("charge", err)
			if err == nil {
				res, err := e.att.Execute(e.ctx, *cc.AttemptID)
				fail("charge execute", err)
				if err == nil && res.Attempt.Status != attempts.StatusSucceeded {
					fail("charge execute", fmt.Errorf("status %s", res.Attempt.Status))
				}
			}
		default:
			res, err := e.att.Resolve(e.ctx, *inflight.CurrentAttemptID)
			fail("release", err)
			if err == nil && res.Attempt.Status != attempts.StatusFailed {
				fail("release", fmt.Errorf("status %s", res.Attempt.Status))
			}
		}
	})
	close(done)
	watch.Wait()
	require.Empty(t, errs, "no deadlock or other error reaches a caller")
	require.Empty(t, over, "held never above wanted, holds consistent throughout")
	require.Equal(t, dupIDs[0], dupIDs[1], "one funding for the repeated key")
	require.Equal(t, 1, e.count(`SELECT count(*) FROM ledger_transactions WHERE idempotency_key = $1`, "funding:"+merchant+":race-dup"))
	e.requireHoldsClean()
	m1, err := ledger.MerchantBalanceIn(e.ctx, e.pool, merchant, money.BRL)
	require.NoError(t, err)
	t.Logf("after the race: m1 %s held, %d top-ups; record batches %+v", m1.Held.StringFixed(2), len(e.topUps(ca.ID)),
		e.att.BatchStats().Records)

	// m1's money in: 10.00 + 10 x 4.00 + 3.00 + 20.00 released + 4 x 5.00
	// + 4 x 3.00 = 105.00 against 60.00 in doubt; m2's: 5.00 + 4 x 2.00 =
	// 13.00 against 40.00. Whatever the order, m1's hold is whole unless
	// the dispute and a credit committed at the same instant (the credit
	// did not see the divergence yet, the hold did not see the credit
	// yet): one more funding of each fills what is still short.
	e.fund(merchant, brl("1.00"), "after")
	e.fund(partner, brl("100.00"), "after")
	e.requireBRL(merchant, "46.00", "60.00")
	e.requireBRL(partner, "73.00", "40.00")
	e.requireHoldsClean()

	settled, err := e.att.SettleDivergence(e.ctx, ca.ID, "op-1", "dispute lost", attempts.HoldBook)
	require.NoError(t, err)
	require.True(t, strings.Contains(settled.DivergenceSettlement, "60.00 BRL of merchant "+merchant), settled.DivergenceSettlement)
	e.requireBRL(merchant, "46.00", "0.00")
}

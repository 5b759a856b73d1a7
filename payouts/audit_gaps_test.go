package payouts_test

// The audit's payout checks (payouts.Verify). Each test builds a real state
// through the services, then simulates ONE bug the way a buggy writer inside
// saldo could (ordinary INSERT/UPDATE as the app role, ledger.Post with
// wrong arguments), and asserts that audit.Run reports it under the check
// that holds the rule.

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// tamperEnv is setupTB with the audit after the test left to the test
// (these tests break invariants on purpose), and a second merchant m2.
func tamperEnv(t *testing.T, cfg sim.Config, balance string) *env {
	t.Helper()
	e := setupTB(t, cfg, balance)
	e.tampered = true
	_, err := merchants.Create(e.ctx, e.pool, "m2", "Loja m2")
	require.NoError(t, err)
	return e
}

func (e *env) requireAuditClean() {
	e.t.Helper()
	res, err := audit.Run(e.ctx, e.pool)
	require.NoError(e.t, err)
	require.True(e.t, res.OK(), "precondition: the honest state audits clean: %s", res.Summary())
}

// requireAuditReports asserts the audit reports what, under check
// ("area/check").
func (e *env) requireAuditReports(check, what string) {
	e.t.Helper()
	res, err := audit.Run(e.ctx, e.pool)
	require.NoError(e.t, err)
	require.False(e.t, res.OK(), "the audit reports: %s; it says: %s", what, res.Summary())
	found := false
	for _, v := range res.Violations {
		found = found || v.Area+"/"+v.Check == check
	}
	require.True(e.t, found, "%s reports: %s; the audit says: %s", check, what, res.Summary())
}

// finaliseWithLegs simulates a buggy finaliser of the open attempt of p:
// the attempt goes pending -> succeeded with a valid transition event, the
// payout succeeded, and the settle is posted under the right cause, cause
// id and key, but with the legs given. All in one transaction, as the app.
func (e *env) finaliseWithLegs(p payouts.Payout, legs []ledger.PostingInput) {
	e.t.Helper()
	require.NotNil(e.t, p.CurrentAttemptID)
	aid := *p.CurrentAttemptID
	now := e.clock.Now()
	require.NoError(e.t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(e.ctx, `UPDATE attempts SET status = 'succeeded', provider_state = 'succeeded',
			resolved_at = $2, resolved_by = 'worker', updated_at = $2 WHERE id = $1 AND status = 'pending'`, aid, now); err != nil {
			return err
		}
		if _, err := tx.Exec(e.ctx, `INSERT INTO attempt_events (attempt_id, at, type, actor, from_status, to_status)
			VALUES ($1, $2, 'transition', 'worker', 'pending', 'succeeded')`, aid, now); err != nil {
			return err
		}
		if _, err := tx.Exec(e.ctx, `UPDATE payouts SET status = 'succeeded', updated_at = $2 WHERE id = $1`, p.ID, now); err != nil {
			return err
		}
		_, err := ledger.Post(e.ctx, tx, ledger.TransactionInput{
			IdempotencyKey: payouts.CauseSettle + ":" + aid.String(),
			CauseKind:      payouts.CauseSettle, CauseID: aid.String(),
			Description: "buggy settle", Metadata: map[string]string{"payout_id": p.ID, "merchant_id": p.MerchantID},
			Postings: legs,
		})
		return err
	}))
}

func leg(spec ledger.AccountSpec, amount string) ledger.PostingInput {
	return ledger.PostingInput{AccountCode: spec.Code(), Amount: decimal.RequireFromString(amount), Currency: money.BRL}
}

// payouts/effect_legs: a payout's settle moves exactly the payout's amount
// from its merchant's reserve to the provider's clearing account. A settle
// that credits ANOTHER merchant's available balance instead is reported,
// though reserved equals the open attempts (0), the attempt has one reserve
// and one settle and the ledger balances. Before, ledger_effects counted
// transactions by cause_kind without looking at their legs, and the audit
// said OK while m2 held 10.00 of m1's money (found by review).
func TestAuditReportsASettleToTheWrongAccount(t *testing.T) {
	t.Parallel()
	e := tamperEnv(t, sim.Config{}, "100.00")
	_, err := ledger.EnsureAccount(e.ctx, e.pool, ledger.MerchantAvailable("m2", money.BRL))
	require.NoError(t, err)
	p, err := e.svc.CreatePayout(e.ctx, e.pix("10.00"))
	require.NoError(t, err)
	e.requireAuditClean()

	e.finaliseWithLegs(p, []ledger.PostingInput{
		leg(ledger.MerchantReserved(merchant, money.BRL), "-10.00"),
		leg(ledger.MerchantAvailable("m2", money.BRL), "10.00"), // not the provider's clearing account
	})
	e.requireAuditReports("payouts/effect_legs", "a payout_settle that credits merchant m2's available balance instead of the provider's clearing account")
}

// payouts/effect_legs: a settle moves the payout's amount and nothing more.
// One that takes the payout's 10.00 from the reserve and 15.00 more from
// the merchant's available balance, crediting clearing with 25.00, is
// reported. Before, the merchant was debited 25.00 for a 10.00 payout and
// the audit said OK (found by review).
func TestAuditReportsASettleOfTheWrongAmount(t *testing.T) {
	t.Parallel()
	e := tamperEnv(t, sim.Config{}, "100.00")
	p, err := e.svc.CreatePayout(e.ctx, e.pix("10.00"))
	require.NoError(t, err)
	e.requireAuditClean()

	e.finaliseWithLegs(p, []ledger.PostingInput{
		leg(ledger.MerchantReserved(merchant, money.BRL), "-10.00"),
		leg(ledger.MerchantAvailable(merchant, money.BRL), "-15.00"),
		leg(ledger.ProviderClearing(e.prov.Name(), money.BRL), "25.00"),
	})
	av, _ := e.balances()
	require.Equal(t, "75.00", av, "the merchant paid 25.00 for a 10.00 payout")
	e.requireAuditReports("payouts/effect_legs", "a 10.00 payout settled with 25.00")
}

// payouts/effect_orphan: every payout_* transaction's cause is an outgoing
// attempt of a payout. A reserve and a settle naming an attempt that never
// existed (10.00 leaves the merchant's available balance for the provider's
// clearing account with no payout behind it) are reported, though the
// reserved balance nets to zero. Before, ledger_effects looked only at
// transactions whose cause_id matched an attempt, payouts had no orphan
// check, and the audit said OK (found by review).
func TestAuditReportsPayoutEffectsOfNoAttempt(t *testing.T) {
	t.Parallel()
	e := tamperEnv(t, sim.Config{}, "100.00")
	for _, spec := range []ledger.AccountSpec{ledger.MerchantReserved(merchant, money.BRL), ledger.ProviderClearing(e.prov.Name(), money.BRL)} {
		_, err := ledger.EnsureAccount(e.ctx, e.pool, spec)
		require.NoError(t, err)
	}
	e.requireAuditClean()

	ghost := uuid.New().String()
	for _, in := range []ledger.TransactionInput{
		{IdempotencyKey: payouts.CauseReserve + ":" + ghost, CauseKind: payouts.CauseReserve, CauseID: ghost,
			Postings: []ledger.PostingInput{leg(ledger.MerchantAvailable(merchant, money.BRL), "-10.00"),
				leg(ledger.MerchantReserved(merchant, money.BRL), "10.00")}},
		{IdempotencyKey: payouts.CauseSettle + ":" + ghost, CauseKind: payouts.CauseSettle, CauseID: ghost,
			Postings: []ledger.PostingInput{leg(ledger.MerchantReserved(merchant, money.BRL), "-10.00"),
				leg(ledger.ProviderClearing(e.prov.Name(), money.BRL), "10.00")}},
	} {
		_, err := ledger.Post(e.ctx, e.pool, in)
		require.NoError(t, err)
	}
	av, res := e.balances()
	require.Equal(t, "90.00", av)
	require.Equal(t, "0.00", res)
	e.requireAuditReports("payouts/effect_orphan", "payout_reserve and payout_settle transactions for attempt "+ghost+", which does not exist")
}

// payouts/status: a payout's current attempt is its own (a.subject_id =
// p.id) and its status follows that attempt. P2, whose only attempt was
// declined and its reserve released, marked succeeded with
// current_attempt_id pointing at P1's succeeded attempt, is reported.
// Before, the status check joined the current attempt by id alone and said
// OK while P2 showed succeeded, paid by nothing (found by review).
func TestAuditReportsAPayoutPointingAtAnotherPayoutsAttempt(t *testing.T) {
	t.Parallel()
	// The PSP holds 15.00: the first 10.00 goes out, the second is declined.
	e := tamperEnv(t, sim.Config{Balances: map[string]string{"BRL": "15.00"}}, "100.00")
	p1, err := e.svc.CreatePayout(e.ctx, e.pix("10.00"))
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, e.execute(p1).Status)
	p2, err := e.svc.CreatePayout(e.ctx, e.pix("10.00"))
	require.NoError(t, err)
	require.Equal(t, attempts.StatusFailed, e.execute(p2).Status)
	require.Equal(t, payouts.StatusFailed, e.get(p2).Status)
	e.requireAuditClean()

	_, err = e.pool.Exec(e.ctx, `UPDATE payouts SET status = 'succeeded', current_attempt_id = $2, failure_code = NULL,
		failure_reason = NULL WHERE id = $1`, p2.ID, *p1.CurrentAttemptID)
	require.NoError(t, err)
	require.Equal(t, payouts.StatusSucceeded, e.get(p2).Status, "the merchant now sees P2 paid")
	av, _ := e.balances()
	require.Equal(t, "90.00", av, "yet only one payout's 10.00 left the balance")
	e.requireAuditReports("payouts/status", "payout "+p2.ID+" succeeded though its own attempt failed (its current attempt belongs to another payout)")
}

// payouts/split_total: a split's total and leg count are its legs'. A split
// whose splits.total (what GetSplit shows the merchant) says 40.00 in 3
// legs while its 2 legs reserve and pay 30.00 is reported. Before, nothing
// in the audit compared splits with their legs (found by review).
func TestAuditReportsASplitTotalOtherThanItsLegs(t *testing.T) {
	t.Parallel()
	e := tamperEnv(t, sim.Config{}, "100.00")
	sp, err := e.svc.CreateSplit(e.ctx, payouts.SplitRequest{MerchantID: merchant, ClientKey: "sp", Legs: []payouts.SplitLeg{
		{Operation: providers.OpPixTransfer, Amount: brl("10.00"), Destination: pixTo("a@example.com")},
		{Operation: providers.OpPixTransfer, Amount: brl("20.00"), Destination: pixTo("b@example.com")},
	}})
	require.NoError(t, err)
	for _, l := range sp.Legs {
		require.Equal(t, attempts.StatusSucceeded, e.execute(l).Status)
	}
	e.requireAuditClean()

	_, err = e.pool.Exec(e.ctx, `UPDATE splits SET total = 40, leg_count = 3 WHERE id = $1`, sp.ID)
	require.NoError(t, err)
	got, err := e.svc.GetSplit(e.ctx, merchant, sp.ID)
	require.NoError(t, err)
	require.Equal(t, "40.00 BRL", got.Total.String())
	require.Len(t, got.Legs, 2)
	e.requireAuditReports("payouts/split_total", "split "+sp.ID+" says 40.00 in 3 legs, its legs are 30.00 in 2")
}

// R21, payouts/refunds: a charge's refunds never exceed it, and the audit
// counts a failed refund with a divergence (the money left) as refundable()
// does. Reached through the services alone: a full refund of a 100.00
// charge is unknown, then resolved failed; a second full refund succeeds;
// then the provider reports the first paid after all. The payer got 200.00
// back, and once an operator settles the divergence the audit still reports
// the charge. Before, the refunds check counted only processing and
// succeeded refunds and said OK about a charge refunded twice over (found
// by review).
func TestAuditReportsOverRefundThroughADivergedRefund_R21(t *testing.T) {
	t.Parallel()
	e := tamperEnv(t, sim.Config{}, "500.00")
	ch, err := charges.New(charges.Config{Pool: e.pool, Attempts: e.att, Provider: e.prov.Name(), Clock: e.clock})
	require.NoError(t, err)
	e.svc, err = payouts.New(payouts.Config{Pool: e.pool, Attempts: e.att, Provider: e.prov.Name(), Clock: e.clock, Charges: ch})
	require.NoError(t, err)
	c, err := ch.Create(e.ctx, charges.ChargeRequest{MerchantID: merchant, Kind: charges.KindCard,
		Amount: brl("100.00"), CardToken: "tok_visa"})
	require.NoError(t, err)
	res, err := e.att.Execute(e.ctx, *c.AttemptID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, res.Attempt.Status)

	r1, err := e.svc.CreateRefund(e.ctx, payouts.RefundRequest{MerchantID: merchant, ChargeID: c.ID, ClientKey: "r1"})
	require.NoError(t, err)
	first := e.attempt(r1)
	require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: first.Reference}))
	require.Equal(t, attempts.StatusUnknown, e.execute(r1).Status)
	require.Equal(t, attempts.StatusFailed, e.resolveAfter(r1, time.Hour).Attempt.Status)

	r2, err := e.svc.CreateRefund(e.ctx, payouts.RefundRequest{MerchantID: merchant, ChargeID: c.ID, ClientKey: "r2"})
	require.NoError(t, err)
	require.Equal(t, "100.00", r2.Amount.Decimal().StringFixed(2))
	require.Equal(t, attempts.StatusSucceeded, e.execute(r2).Status)

	_, err = e.att.ResolveByReference(e.ctx, attempts.ResolveInput{Reference: first.Reference, Provider: first.Provider,
		Operation: providers.OpRefund, Amount: "100.00", Currency: "BRL", State: providers.StateSucceeded,
		ProviderID: "late_refund_1", Source: attempts.SourceWebhook, Actor: "evt_late_refund"})
	require.NoError(t, err)
	_, err = e.att.SettleDivergence(e.ctx, first.ID, "op_1", "refund booked as a loss", attempts.HoldBook)
	require.NoError(t, err)

	// saldo itself knows the charge is over-refunded: nothing is refundable.
	_, err = e.svc.CreateRefund(e.ctx, payouts.RefundRequest{MerchantID: merchant, ChargeID: c.ID, ClientKey: "r3",
		Amount: brl("0.01")})
	require.ErrorIs(t, err, payouts.ErrRefundExceedsCharge)

	e.requireAuditReports("payouts/refunds", "charge "+c.ID+" of 100.00 has 200.00 refunded (one refund failed then reported paid)")
}

// payouts/effect_reversed: a payout's ledger effects are never reversed. A
// succeeded payout whose settle and reserve are both reversed
// (ledger.Reverse), giving the merchant back 10.00 the provider paid out, is
// reported. Before, ledger_effects counted only payout_* cause kinds, never
// reversals, so "one ledger effect per final attempt" looked held and the
// audit said OK (found by review).
func TestAuditReportsReversedPayoutEffects(t *testing.T) {
	t.Parallel()
	e := tamperEnv(t, sim.Config{}, "100.00")
	p, err := e.svc.CreatePayout(e.ctx, e.pix("10.00"))
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, e.execute(p).Status)
	require.Equal(t, 1, e.opsFor(e.attempt(p)), "the PSP paid it")
	e.requireAuditClean()

	for _, cause := range []string{payouts.CauseSettle, payouts.CauseReserve} {
		var id int64
		require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT id FROM ledger_transactions WHERE cause_kind = $1 AND cause_id = $2`,
			cause, p.CurrentAttemptID.String()).Scan(&id))
		_, err := ledger.Reverse(e.ctx, e.pool, id, "buggy-correction-"+cause, "buggy correction")
		require.NoError(t, err)
	}
	av, res := e.balances()
	require.Equal(t, "100.00", av, "the merchant has the paid-out 10.00 back")
	require.Equal(t, "0.00", res)
	require.Equal(t, payouts.StatusSucceeded, e.get(p).Status)
	e.requireAuditReports("payouts/effect_reversed", "succeeded payout "+p.ID+" whose reserve and settle were reversed (net ledger effect 0)")
}

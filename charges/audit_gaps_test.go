package charges_test

// The audit's charge checks (charges.Verify). Each test builds a real state
// through the services, then simulates one bug the way a buggy writer inside
// saldo could (ordinary UPDATE as the app role, ledger.Post with the
// charge's own cause, ledger.Reverse), and asserts audit.Run reports it.

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers/sim"
)

// charges/status: a charge's attempt is its own (a.subject_id = c.id) and
// its status follows that attempt. C1, whose own attempt is still pending
// (never sent), marked paid, credited with exactly the legs its breakdown
// says and pointed at C2's succeeded attempt, is reported. Before, the
// status check joined the charge's attempt by id alone and the audit said OK
// while m1 got 50.00 for a charge nobody paid (found by review).
func TestAuditReportsAChargePointingAtAnotherChargesAttempt(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, opts{noAudit: true})
	c2 := e.create(e.card("100.00", "tok_visa"))
	require.Equal(t, attempts.StatusSucceeded, e.execute(c2).Status)
	c2 = e.get(c2)
	require.Equal(t, charges.StatusPaid, c2.Status)
	c1 := e.create(e.card("50.00", "tok_visa")) // never executed: its attempt stays pending
	res, err := audit.Run(e.ctx, e.pool)
	require.NoError(t, err)
	require.True(t, res.OK(), "precondition: %s", res.Summary())

	require.NoError(t, pgx.BeginFunc(e.ctx, e.pool, func(tx pgx.Tx) error {
		legs := []ledger.PostingInput{
			{AccountCode: ledger.ProviderClearing(c1.Provider, money.BRL).Code(), Amount: c1.Amount.Decimal().Neg(), Currency: money.BRL},
			{AccountCode: ledger.MerchantAvailable(merchant, money.BRL).Code(), Amount: c1.MerchantNet.Decimal(), Currency: money.BRL},
		}
		if !c1.Fee.Decimal().IsZero() {
			legs = append(legs, ledger.PostingInput{AccountCode: ledger.PlatformFees(money.BRL).Code(), Amount: c1.Fee.Decimal(), Currency: money.BRL})
		}
		credit, err := ledger.Post(e.ctx, tx, ledger.TransactionInput{IdempotencyKey: charges.CauseCredit + ":" + c1.ID,
			CauseKind: charges.CauseCredit, CauseID: c1.ID, Description: "buggy credit", Postings: legs})
		if err != nil {
			return err
		}
		_, err = tx.Exec(e.ctx, `UPDATE charges SET status = 'paid', paid_at = $2, paid_by = 'worker', credit_tx_id = $3,
			attempt_id = $4, updated_at = $2 WHERE id = $1`, c1.ID, e.clock.Now(), credit.ID, *c2.AttemptID)
		return err
	}))
	own, err := e.att.Get(e.ctx, e.pool, *c1.AttemptID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusPending, own.Status, "C1's own attempt never reached the provider")
	require.Equal(t, charges.StatusPaid, e.get(c1).Status)
	require.Equal(t, "150.00", e.available(merchant, money.BRL), "m1 credited for two charges, one operation captured")

	res, err = audit.Run(e.ctx, e.pool)
	require.NoError(t, err)
	require.False(t, res.OK(), "the audit reports charge %s paid by charge %s's attempt while its own attempt is pending; it says: %s",
		c1.ID, c2.ID, res.Summary())
}

// A paid charge's credit is never reversed: a paid charge whose credit is
// reversed (ledger.Reverse; the charge stays paid, the merchant's 100.00 is
// gone) is reported. Before, charges.Verify counted and summed only
// charge_credit transactions, so the reversal was invisible and "every paid
// charge credited exactly once" held on paper with a net credit of 0 (found
// by review).
func TestAuditReportsAReversedChargeCredit(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, opts{noAudit: true})
	c := e.create(e.card("100.00", "tok_visa"))
	require.Equal(t, attempts.StatusSucceeded, e.execute(c).Status)
	c = e.get(c)
	require.Equal(t, charges.StatusPaid, c.Status)
	require.Equal(t, "100.00", e.available(merchant, money.BRL))
	res, err := audit.Run(e.ctx, e.pool)
	require.NoError(t, err)
	require.True(t, res.OK(), "precondition: %s", res.Summary())

	_, err = ledger.Reverse(e.ctx, e.pool, c.CreditTransactionID, "buggy-correction", "buggy correction")
	require.NoError(t, err)
	require.Equal(t, charges.StatusPaid, e.get(c).Status)
	require.Equal(t, "0.00", e.available(merchant, money.BRL), "the paid charge's credit is undone")

	res, err = audit.Run(e.ctx, e.pool)
	require.NoError(t, err)
	require.False(t, res.OK(), "the audit reports paid charge %s whose credit was reversed (net credit 0); it says: %s",
		c.ID, res.Summary())
}

package charges_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/charges"
)

// A charge's opening transaction commits but its COMMIT answer is lost:
// charges.Create makes the charge id before its transaction and, after an
// error that may have committed, answers the charge that committed, so a
// caller without a key never asks again and pays twice (R22; as payouts do
// for a payout, a refund and a split, TestLostCommitOfSplitAnswersWhatCommitted_R22,
// TestLostCommitOfRefundAnswersWhatCommitted_R22). Before, Create told its
// caller the charge failed while the charge and its submit job had
// committed, and the repeat charged the payer's card twice for one intent
// (found by review).
func TestLostCommitOfChargeAnswersWhatCommitted_R22(t *testing.T) {
	t.Parallel()
	e, proxy := setupProxied(t)

	proxy.LoseCommitAnswer("INSERT INTO charges", 1)
	c, err := e.svc.Create(e.ctx, e.card("50.00", "tok_visa"))
	require.Equal(t, 1, proxy.Cuts(), "the opening transaction's commit answer was lost")
	var committed int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM charges`).Scan(&committed))
	require.Equal(t, 1, committed, "the charge committed")
	if err != nil {
		// A caller without a key that is told "failed" asks again; the
		// submit jobs of both charges run (here: executed by hand).
		c2, err2 := e.svc.Create(e.ctx, e.card("50.00", "tok_visa"))
		require.NoError(t, err2)
		var ids []string
		rows, qerr := e.pool.Query(e.ctx, `SELECT attempt_id::text FROM charges ORDER BY created_at, id`)
		require.NoError(t, qerr)
		for rows.Next() {
			var id string
			require.NoError(t, rows.Scan(&id))
			ids = append(ids, id)
		}
		require.NoError(t, rows.Err())
		paid := 0
		for _, id := range ids {
			var ref string
			require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT reference FROM attempts WHERE id = $1`, id).Scan(&ref))
			var cid string
			require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT subject_id FROM attempts WHERE id = $1`, id).Scan(&cid))
			ch := charges.Charge{ID: cid, MerchantID: merchant}
			got := e.get(ch)
			e.execute(got)
			paid += e.moneyMoving(ref)
		}
		t.Logf("Create answered %v; the caller's repeat made charge %s; card captures at the provider: %d", err, c2.ID, paid)
	}
	require.NoError(t, err, "the charge committed (and will be captured), so its caller is answered that charge, not an error")
	require.NotEmpty(t, c.ID)
}

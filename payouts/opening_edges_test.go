package payouts_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// R4/R5: two requests with the same client key and the same body in ONE
// opening batch: one payout, both answered with it.
func TestSameKeySameBodyInOneBatch_R4(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	a := e.pix("10.00")
	a.ClientKey = "dup"
	ps, errs := e.svc.CreateTogether(e.ctx, []payouts.PayoutRequest{a, e.pix("1.00"), a})
	for i, err := range errs {
		require.NoError(t, err, "request %d", i)
	}
	require.Equal(t, ps[0].ID, ps[2].ID)
	require.Equal(t, 2, e.count(`SELECT count(*) FROM payouts`))
	require.Equal(t, 2, e.count(`SELECT count(*) FROM ledger_transactions WHERE cause_kind = 'payout_reserve'`))
	require.Equal(t, 2, e.count(`SELECT count(*) FROM river_job WHERE kind = $1`, attempts.SubmitAttemptKind))
}

// R4/R5: same key, different bodies in one batch: one payout and one
// conflict, never two payouts.
func TestSameKeyOtherBodyInOneBatch_R5(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	a, b := e.pix("10.00"), e.pix("11.00")
	a.ClientKey, b.ClientKey = "dup", "dup"
	ps, errs := e.svc.CreateTogether(e.ctx, []payouts.PayoutRequest{a, e.pix("1.00"), b})
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.ErrorIs(t, errs[2], payouts.ErrIdempotencyConflict)
	require.Equal(t, "10.00 BRL", ps[0].Amount.String())
	require.Equal(t, 2, e.count(`SELECT count(*) FROM payouts`))
	av, res := e.balances()
	require.Equal(t, "89.00", av)
	require.Equal(t, "11.00", res)
}

// The request that claimed the key is refused (insufficient balance); the
// other request with the same key and another body is affordable. One
// payout (the affordable one), the refused one gets a conflict or the
// refusal, and nothing is written for it.
func TestKeyClaimerRefusedInBatch_R23(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "51.00")
	_, err := e.svc.CreatePayout(e.ctx, e.pix("1.00")) // warms the account cache: no pre-check
	require.NoError(t, err)
	a, b := e.pix("60.00"), e.pix("10.00")
	a.ClientKey, b.ClientKey = "dup", "dup"
	ps, errs := e.svc.CreateTogether(e.ctx, []payouts.PayoutRequest{a, e.pix("1.00"), b})
	require.NoError(t, errs[1])
	require.NoError(t, errs[2])
	require.Equal(t, "10.00 BRL", ps[2].Amount.String())
	require.Error(t, errs[0])
	t.Logf("refused claimer answered %v", errs[0])
	require.Equal(t, 3, e.count(`SELECT count(*) FROM payouts`))
	require.Equal(t, 1, e.count(`SELECT count(*) FROM payout_requests`))
	av, res := e.balances()
	require.Equal(t, "39.00", av)
	require.Equal(t, "12.00", res)
}

// Issue 13 with keys: the opening batch holds two requests with the same
// key (same body, and another body) and its COMMIT answer is lost. Nothing
// is created twice; the same body gets the payout, the other a conflict.
func TestLostCommitOfBatchWithDuplicateKeys_R22(t *testing.T) {
	t.Parallel()
	e, proxy, _ := setupProxiedPool(t, "100.00")
	proxy.LoseCommitAnswer("INSERT INTO payouts", 1)
	a, b := e.pix("10.00"), e.pix("11.00")
	a.ClientKey, b.ClientKey = "dup", "dup"
	ps, errs := e.svc.CreateTogether(e.ctx, []payouts.PayoutRequest{a, a, e.pix("1.00"), b})
	require.Equal(t, 1, proxy.Cuts())
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.NoError(t, errs[2])
	require.ErrorIs(t, errs[3], payouts.ErrIdempotencyConflict)
	require.Equal(t, ps[0].ID, ps[1].ID)
	require.Equal(t, 2, e.count(`SELECT count(*) FROM payouts`))
	require.Equal(t, 2, e.count(`SELECT count(*) FROM attempts`))
	require.Equal(t, 2, e.count(`SELECT count(*) FROM ledger_transactions WHERE cause_kind = 'payout_reserve'`))
	require.Equal(t, 2, e.count(`SELECT count(*) FROM river_job WHERE kind = $1`, attempts.SubmitAttemptKind))
}

// A key claimed by a payout whose one-at-a-time COMMIT answer was lost:
// the repeat, in a later batch, is answered with that payout.
func TestRepeatAfterLostCommitInLaterBatch_R4(t *testing.T) {
	t.Parallel()
	e, proxy, _ := setupProxiedPool(t, "100.00")
	a := e.pix("10.00")
	a.ClientKey = "k1"
	proxy.LoseCommitAnswer("INSERT INTO payouts", 1)
	p, err := e.svc.CreatePayout(e.ctx, a)
	require.Equal(t, 1, proxy.Cuts())
	require.NoError(t, err)
	ps, errs := e.svc.CreateTogether(e.ctx, []payouts.PayoutRequest{e.pix("1.00"), a})
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.Equal(t, p.ID, ps[1].ID)
	require.Equal(t, 2, e.count(`SELECT count(*) FROM payouts`))
}

// A caller that gives up while its batch is being written: told ctx's
// error (the documented contract), the payout commits, and its repeat with
// the same key gets that payout; nothing twice.
func TestCancelledCallerRepeatGetsCommitted_R4(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	req := e.pix("10.00")
	req.ClientKey = "cancel-me"
	// Warm the account cache (so the call reaches the batch), then hold an
	// uncommitted claim of the key so the batch's claim statement waits.
	_, err := e.svc.CreatePayout(e.ctx, e.pix("1.00"))
	require.NoError(t, err)
	tx, err := e.pool.Begin(e.ctx)
	require.NoError(t, err)
	defer tx.Rollback(e.ctx) //nolint:errcheck
	_, err = tx.Exec(e.ctx, `INSERT INTO payout_requests (merchant_id, client_key, request_hash, object_kind, object_id, created_at)
		VALUES ($1, $2, decode(repeat('00', 32), 'hex'), 'payout', 'po_blocker', now())`, merchant, req.ClientKey)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() {
		_, err := e.svc.CreatePayout(ctx, req)
		done <- err
	}()
	// Until the batch's claim waits behind the held one (a fixed 500 ms
	// could end before it got there on a loaded machine, and the caller
	// then gave up before its batch was written at all).
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n))
		return n > 0
	}, 30*time.Second, 5*time.Millisecond, "the batch's claim never waited for the held key")
	cancel()
	err = <-done
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, tx.Rollback(e.ctx))
	// The batch goes on and commits; the repeat gets its payout.
	var p payouts.Payout
	require.Eventually(t, func() bool {
		p, err = e.svc.CreatePayout(e.ctx, req)
		return err == nil
	}, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, 2, e.count(`SELECT count(*) FROM payouts`))
	require.Equal(t, 1, e.count(`SELECT count(*) FROM payouts WHERE id = $1`, p.ID))
	require.Equal(t, "10.00 BRL", p.Amount.String())
	av, res := e.balances()
	require.Equal(t, "89.00", av)
	require.Equal(t, "11.00", res)
}

// Splits and refunds open one at a time: a COMMIT whose answer is lost but
// committed is answered like CreatePayout's (the split or refund it made),
// not with an error that would make a caller without a key ask again and
// pay twice (issue 13, R22).
func TestLostCommitOfSplitAnswersWhatCommitted_R22(t *testing.T) {
	t.Parallel()
	e, proxy, _ := setupProxiedPool(t, "100.00")
	legs := []payouts.SplitLeg{
		{Operation: providers.OpPixTransfer, Amount: brl("20.00"), Destination: pixTo("a@example.com")},
		{Operation: providers.OpPixTransfer, Amount: brl("30.00"), Destination: pixTo("b@example.com")},
	}
	proxy.LoseCommitAnswer("INSERT INTO splits", 1)
	sp, err := e.svc.CreateSplit(e.ctx, payouts.SplitRequest{MerchantID: merchant, Legs: legs})
	require.Equal(t, 1, proxy.Cuts())
	committed := e.count(`SELECT count(*) FROM splits`)
	t.Logf("CreateSplit answered %v (split %q); splits committed: %d", err, sp.ID, committed)
	require.Equal(t, 1, committed, "the split committed")
	if err != nil {
		// A caller without a key that is told "failed" asks again.
		_, err2 := e.svc.CreateSplit(e.ctx, payouts.SplitRequest{MerchantID: merchant, Legs: legs})
		require.NoError(t, err2)
		av, res := e.balances()
		t.Logf("after the caller's repeat: %d splits, %d legs; available %s, reserved %s",
			e.count(`SELECT count(*) FROM splits`), e.count(`SELECT count(*) FROM payouts WHERE kind = 'split_leg'`), av, res)
	}
	require.NoError(t, err, "the split committed, but its caller is told it failed")
}

func TestLostCommitOfRefundAnswersWhatCommitted_R22(t *testing.T) {
	t.Parallel()
	e, proxy, proxied := setupProxiedPool(t, "500.00")
	ch, err := charges.New(charges.Config{Pool: proxied, Attempts: e.att, Provider: e.prov.Name(), Clock: e.clock})
	require.NoError(t, err)
	e.svc, err = payouts.New(payouts.Config{Pool: proxied, Attempts: e.att, Provider: e.prov.Name(), Clock: e.clock, Charges: ch})
	require.NoError(t, err)
	c, err := ch.Create(e.ctx, charges.ChargeRequest{MerchantID: merchant, Kind: charges.KindCard,
		Amount: brl("100.00"), CardToken: "tok_visa"})
	require.NoError(t, err)
	res, err := e.att.Execute(e.ctx, *c.AttemptID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, res.Attempt.Status)

	proxy.LoseCommitAnswer("INSERT INTO payouts", 1)
	r, err := e.svc.CreateRefund(e.ctx, payouts.RefundRequest{MerchantID: merchant, ChargeID: c.ID, Amount: brl("30.00")})
	require.Equal(t, 1, proxy.Cuts())
	committed := e.count(`SELECT count(*) FROM payouts WHERE kind = 'refund'`)
	t.Logf("CreateRefund answered %v (refund %q); refunds committed: %d", err, r.ID, committed)
	require.Equal(t, 1, committed, "the refund committed")
	if err != nil {
		// A caller without a key that is told "failed" asks again.
		_, err2 := e.svc.CreateRefund(e.ctx, payouts.RefundRequest{MerchantID: merchant, ChargeID: c.ID, Amount: brl("30.00")})
		require.NoError(t, err2)
		_, res := e.balances()
		t.Logf("after the caller's repeat: %d refunds of the charge; reserved %s",
			e.count(`SELECT count(*) FROM payouts WHERE kind = 'refund'`), res)
	}
	require.NoError(t, err, "the refund committed, but its caller is told it failed")
}

// R22: a retry whose COMMIT answer is lost (its new attempt and reserve
// committed) answers the payout as the retry left it, not the error: the
// caller who asks again would be told 409 not_retryable for a retry that
// happened. Before, the error was returned (found by review).
func TestLostCommitOfRetryAnswersWhatCommitted_R22(t *testing.T) {
	t.Parallel()
	e, proxy, _ := setupProxiedPool(t, "100.00")
	p, err := e.svc.CreatePayout(e.ctx, e.pix("10.00"))
	require.NoError(t, err)
	a := e.attempt(p)
	require.NoError(t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: a.Reference}))
	require.Equal(t, attempts.StatusUnknown, e.execute(p).Status)
	require.Equal(t, attempts.StatusFailed, e.resolveAfter(p, time.Hour).Attempt.Status)

	proxy.LoseCommitAnswer("UPDATE payouts SET status = 'processing'", 1)
	r, err := e.svc.Retry(e.ctx, merchant, p.ID)
	require.Equal(t, 1, proxy.Cuts())
	require.Equal(t, 2, e.count(`SELECT count(*) FROM attempts WHERE subject_id = '`+p.ID+`'`), "the retry committed")
	require.NoError(t, err, "the retry committed, but its caller is told it failed")
	require.Equal(t, payouts.StatusProcessing, r.Status)
	require.Equal(t, 2, r.AttemptCount)
}

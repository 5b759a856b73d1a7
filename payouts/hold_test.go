package payouts_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/holds"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers/sim"
)

// held is m's held BRL balance.
func (e *env) heldOf(m string) string {
	e.t.Helper()
	b, err := ledger.MerchantBalanceIn(e.ctx, e.pool, m, money.BRL)
	require.NoError(e.t, err)
	return b.Held.StringFixed(2)
}

// failedPayout creates a Pix payout of amount and has it resolved failed
// (a 503 without executing, then "not found" past the window): its reserve
// goes back to available (R16, R22).
func (e *env) failedPayout(amount string) (payouts.Payout, attempts.Attempt) {
	e.t.Helper()
	p, err := e.svc.CreatePayout(e.ctx, e.pix(amount))
	require.NoError(e.t, err)
	a := e.attempt(p)
	require.NoError(e.t, e.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: a.Reference}))
	require.Equal(e.t, attempts.StatusUnknown, e.execute(p).Status)
	require.Equal(e.t, attempts.StatusFailed, e.resolveAfter(p, time.Hour).Attempt.Status)
	return p, a
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// R9, R19, R22: a payout resolved failed (its reserve released into
// available) that the provider then reports paid: the money left. In the
// divergence's own transaction the payout's amount moves from the
// merchant's available balance to its held balance, so a new payout of
// that money is refused for insufficient funds. Settling without a hold
// decision is refused, naming the amount, and changes nothing; settling
// with "book" moves the held money to the provider's clearing account
// (gone) and held is zero; the audit is clean. Before, available kept the
// released 30.00 and the merchant could pay it out a second time.
func TestPayoutPaidAfterFailureHoldsTheReleasedReserve_R9_R19_R22(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	p, a := e.failedPayout("30.00")
	avail, _ := e.balances()
	require.Equal(t, "100.00", avail, "the failed attempt's reserve went back")

	e.lateSuccess(a, "30.00")
	avail, reserved := e.balances()
	require.Equal(t, "70.00", avail, "the money that left is no longer available")
	require.Equal(t, "0.00", reserved)
	require.Equal(t, "30.00", e.heldOf(merchant))
	// The hold is the divergence's: same transaction (one commit), caused
	// by the attempt, under its key.
	var xmins int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(DISTINCT x) FROM (
		SELECT xmin::text AS x FROM attempts WHERE id = $1
		UNION ALL SELECT xmin::text FROM ledger_transactions WHERE cause_kind = $2 AND cause_id = $1::text
			AND idempotency_key = $3) s`, a.ID, holds.CauseHold, holds.CauseHold+":"+a.ID.String()).Scan(&xmins))
	require.Equal(t, 1, xmins, "the hold is written by the transaction that records the divergence")

	_, err := e.svc.CreatePayout(e.ctx, e.pix("80.00"))
	require.ErrorIs(t, err, payouts.ErrInsufficientBalance, "held money cannot be paid out")

	// No decision: refused with the amount, nothing changes.
	_, err = e.att.SettleDivergence(e.ctx, a.ID, "op-1", "paid twice", attempts.HoldNone)
	require.ErrorIs(t, err, attempts.ErrHoldUndecided)
	require.ErrorIs(t, err, attempts.ErrInvalid)
	require.Contains(t, err.Error(), "30.00 BRL")
	got, err := e.att.Get(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	require.Nil(t, got.DivergenceSettledAt)
	require.Equal(t, "30.00", e.heldOf(merchant))

	clearing, err := ledger.Balance(e.ctx, e.pool, ledger.ProviderClearing(e.prov.Name(), money.BRL).Code())
	require.NoError(t, err)
	settled, err := e.att.SettleDivergence(e.ctx, a.ID, "op-1", "paid twice by the PSP; the recipient keeps it", attempts.HoldBook)
	require.NoError(t, err)
	require.Contains(t, settled.DivergenceSettlement, "30.00 BRL of merchant m1")
	require.Contains(t, settled.DivergenceSettlement, "booked as gone")
	require.Equal(t, "0.00", e.heldOf(merchant))
	avail, _ = e.balances()
	require.Equal(t, "70.00", avail)
	after, err := ledger.Balance(e.ctx, e.pool, ledger.ProviderClearing(e.prov.Name(), money.BRL).Code())
	require.NoError(t, err)
	require.Equal(t, clearing.Decimal().Add(decimal.RequireFromString("30")).String(), after.Decimal().String(),
		"the clearing account shows the money gone")
	require.Equal(t, payouts.StatusFailed, e.get(p).Status, "the status stays (R9)")
	// auditClean runs after the test.
}

// R9, R19, R22: the merchant paid part of the released money out before
// the provider's late success: the hold takes what is available (never
// below zero), records the shortfall in the hold transaction's metadata
// and logs it at ERROR for the operator to recover. The audit stays clean
// once the divergence is settled.
func TestPayoutHoldIsCappedAtAvailable_R9_R19_R22(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	var logs syncBuffer
	// The owner with a logger we read (it replaces e.svc as the owner).
	svc, err := payouts.New(payouts.Config{Pool: e.pool, Attempts: e.att, Provider: e.prov.Name(), Clock: e.clock,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	require.NoError(t, err)
	e.svc = svc
	_, a := e.failedPayout("60.00")
	p2, err := e.svc.CreatePayout(e.ctx, e.pix("75.00"))
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, e.execute(p2).Status)
	avail, _ := e.balances()
	require.Equal(t, "25.00", avail)

	e.lateSuccess(a, "60.00")
	avail, _ = e.balances()
	require.Equal(t, "0.00", avail, "held down to zero, never below")
	require.Equal(t, "25.00", e.heldOf(merchant))
	var short, wanted string
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT metadata->>'shortfall', metadata->>'wanted' FROM ledger_transactions
		WHERE cause_kind = $1 AND cause_id = $2`, holds.CauseHold, a.ID.String()).Scan(&short, &wanted))
	require.Equal(t, "35", short)
	require.Equal(t, "60", wanted)
	require.Contains(t, logs.String(), `"level":"ERROR"`)
	require.Contains(t, logs.String(), "divergence hold short")
	require.Contains(t, logs.String(), `"shortfall":"35"`)

	settled, err := e.att.SettleDivergence(e.ctx, a.ID, "op-1", "paid twice; 35.00 to recover from the merchant", attempts.HoldBook)
	require.NoError(t, err)
	require.Contains(t, settled.DivergenceSettlement, "short of what was in doubt by 35")
	require.Equal(t, "0.00", e.heldOf(merchant))
}

// R9, R19, R22, R23: the divergence's hold is recorded while payouts of
// the same merchant are being created concurrently (group-committed
// opening batches locking the merchant's available account): no deadlock,
// no negative balance, nothing lost or made. The 21 payouts of 3.00 and the
// 40.00 hold ask for 103.00 of 100.00: whichever comes first is whole, so
// either the hold took 40.00 and one payout was refused for insufficient
// funds, or every payout was reserved and the hold is 3.00 short. The audit
// is clean once the divergence is settled. Run with -race.
func TestHoldRacingConcurrentPayouts_R9_R19_R22_R23(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{}, "100.00")
	_, a := e.failedPayout("40.00")
	var created, refused int
	var mu sync.Mutex
	runAll(22, func(i int) {
		if i == 0 {
			e.lateSuccess(a, "40.00")
			return
		}
		_, err := e.svc.CreatePayout(e.ctx, e.pix("3.00"))
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			created++
		case errors.Is(err, payouts.ErrInsufficientBalance):
			refused++
		default:
			t.Errorf("payout %d: %v", i, err)
		}
	})
	avail, reserved := e.balances()
	held := e.heldOf(merchant)
	t.Logf("created %d, refused %d; available %s, reserved %s, held %s", created, refused, avail, reserved, held)
	require.Equal(t, 21, created+refused)
	require.Equal(t, fmt.Sprintf("%d.00", 3*created), reserved)
	av, hd := decimal.RequireFromString(avail), decimal.RequireFromString(held)
	require.False(t, av.IsNegative())
	require.Equal(t, "100", av.Add(hd).Add(decimal.RequireFromString(reserved)).String(), "nothing lost or made")
	switch refused {
	case 1:
		require.Equal(t, "40.00", held, "the hold came first and took it all")
	case 0:
		require.Equal(t, "37.00", held, "the payouts came first: the hold is 3.00 short")
	default:
		t.Fatalf("%d payouts refused", refused)
	}
	_, err := e.att.SettleDivergence(e.ctx, a.ID, "op-1", "paid twice; booked", attempts.HoldBook)
	require.NoError(t, err)
}

// The audit's holds checks can fail: a hold posted by hand with more than
// the divergence put in doubt (holds/hold_exceeds), and a divergence
// settled by SQL without releasing or booking its hold (holds/hold_net).
func TestAuditDetectsTamperedHolds_R19_R22(t *testing.T) {
	t.Parallel()
	t.Run("hold_exceeds", func(t *testing.T) {
		t.Parallel()
		e := tamperEnv(t, sim.Config{}, "100.00")
		_, a := e.failedPayout("30.00")
		e.lateSuccess(a, "30.00")
		_, err := e.att.SettleDivergence(e.ctx, a.ID, "op-1", "booked", attempts.HoldBook)
		require.NoError(t, err)
		e.requireAuditClean()
		// A second hold of the same attempt, by hand, of 50.00.
		_, err = ledger.Post(e.ctx, e.pool, ledger.TransactionInput{IdempotencyKey: "hand:" + a.ID.String(),
			CauseKind: holds.CauseHold, CauseID: a.ID.String(), Description: "by hand",
			Postings: []ledger.PostingInput{leg(ledger.MerchantAvailable(merchant, money.BRL), "-50.00"),
				leg(ledger.MerchantHeld(merchant, money.BRL), "50.00")}})
		require.NoError(t, err)
		e.requireAuditReports("holds/hold_exceeds", "a hold of 50.00 for a 30.00 payout")
		e.requireAuditReports("holds/hold_net", "held money left on a settled divergence")
	})
	t.Run("settled_without_decision", func(t *testing.T) {
		t.Parallel()
		e := tamperEnv(t, sim.Config{}, "100.00")
		_, a := e.failedPayout("30.00")
		e.lateSuccess(a, "30.00")
		_, err := e.pool.Exec(e.ctx, `UPDATE attempts SET divergence_settled_at = now(), divergence_settled_by = 'sql',
			divergence_settlement = 'by hand' WHERE id = $1`, a.ID)
		require.NoError(t, err)
		e.requireAuditReports("holds/hold_net", "a settled divergence still holding 30.00")
	})
	t.Run("held_by_another_cause", func(t *testing.T) {
		t.Parallel()
		e := tamperEnv(t, sim.Config{}, "100.00")
		_, err := ledger.EnsureAccount(e.ctx, e.pool, ledger.MerchantHeld(merchant, money.BRL))
		require.NoError(t, err)
		_, err = ledger.Post(e.ctx, e.pool, ledger.TransactionInput{IdempotencyKey: "sneak", CauseKind: "funding",
			CauseID: "sneak", Description: "held by hand",
			Postings: []ledger.PostingInput{leg(ledger.MerchantAvailable(merchant, money.BRL), "-5.00"),
				leg(ledger.MerchantHeld(merchant, money.BRL), "5.00")}})
		require.NoError(t, err)
		e.requireAuditReports("holds/held_balance", "held money no divergence holds")
	})
}

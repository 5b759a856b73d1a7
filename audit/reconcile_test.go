package audit_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
	"github.com/saldo/saldo/reconcile"
)

// Issue 16 (R19): the audit is clean after an honest reconciliation and
// fails while a double payment the statement shows is open (a critical
// divergence: reconcile/double_payment); an operator's resolution with a
// reason clears it, and the settlement of the attempt's second_operation
// divergence the run recorded clears the rest (R9, R19).
func TestRunReportsOpenDoublePayment_R19(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	day := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	clock := sim.NewManualClock(day.Add(10 * time.Hour))
	srv := sim.NewServer(sim.Config{Clock: clock.Now}).Start()
	t.Cleanup(srv.Close)
	prov := srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{ReadTimeout: 5 * time.Second}))
	byName := map[string]providers.Provider{prov.Name(): prov}
	att, err := attempts.New(attempts.Config{Pool: pool, Clock: clock, Providers: byName})
	require.NoError(t, err)
	po, err := payouts.New(payouts.Config{Pool: pool, Attempts: att, Provider: prov.Name(), Clock: clock})
	require.NoError(t, err)
	rec, err := reconcile.New(reconcile.Config{Pool: pool, Attempts: att, Providers: byName, Clock: clock})
	require.NoError(t, err)
	_, err = merchants.Create(ctx, pool, "m1", "Loja")
	require.NoError(t, err)
	_, err = merchants.Fund(ctx, pool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("100.00", "BRL"),
		Key: "k", Reason: "test", Actor: "test"})
	require.NoError(t, err)
	p, err := po.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpPixTransfer,
		Amount:      money.MustParse("10.00", "BRL"),
		Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "a@example.com"}}})
	require.NoError(t, err)
	r, err := att.Execute(ctx, *p.CurrentAttemptID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, r.Attempt.Status)

	clock.Set(day.Add(51 * time.Hour))
	_, err = rec.Run(ctx, prov.Name(), day, reconcile.RunOptions{TriggeredBy: "test"})
	require.NoError(t, err)
	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())

	// The provider's statement shows the payout paid twice.
	require.NoError(t, srv.AddStatementLie(sim.StatementLie{Kind: sim.LieDuplicate, Reference: r.Attempt.Reference}))
	_, err = rec.Run(ctx, prov.Name(), day, reconcile.RunOptions{TriggeredBy: "test"})
	require.NoError(t, err)
	res, err = audit.Run(ctx, pool)
	require.NoError(t, err)
	require.False(t, res.OK())
	var found []audit.Violation
	for _, v := range res.Violations {
		if v.Area == "reconcile" {
			found = append(found, v)
		}
	}
	require.Len(t, found, 1, res.Summary())
	require.Equal(t, "double_payment", found[0].Check)
	require.Contains(t, found[0].Detail, r.Attempt.Reference)
	// The run also handed the second operation to the attempts core: the
	// payout's attempt has diverged (second_operation, R9, R19).
	require.Contains(t, res.Summary(), "attempts/diverged", res.Summary())

	// The ledger-totals divergence the duplicate also causes is high, not
	// critical: the audit reports only the highest severity.
	open, _, err := reconcile.List(ctx, pool, reconcile.Filter{Status: "open"}, "", 10)
	require.NoError(t, err)
	require.Len(t, open, 2)
	for _, d := range open {
		if d.Kind == reconcile.KindDoublePayment {
			_, changed, err := reconcile.Resolve(ctx, pool, d.ID, "key_op", "the PSP reversed the copy, ticket 7", clock.Now())
			require.NoError(t, err)
			require.True(t, changed)
		}
	}
	res, err = audit.Run(ctx, pool)
	require.NoError(t, err)
	require.False(t, res.OK(), "the attempt's divergence stands until an operator settles it")
	require.NotContains(t, res.Summary(), "double_payment")
	_, err = att.SettleDivergence(ctx, r.Attempt.ID, "key_op", "the PSP reversed the copy, ticket 7", attempts.HoldNone)
	require.NoError(t, err)
	res, err = audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
}

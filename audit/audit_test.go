package audit_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// openPayout makes a migrated database with merchant m1 funded 100.00 BRL
// and one open 10.00 Pix transfer of it, against the simulated PSP.
func openPayout(t *testing.T) (*pgxpool.Pool, *attempts.Service, payouts.Payout) {
	t.Helper()
	ctx := context.Background()
	pool := testdb.New(t)
	srv := sim.NewServer(sim.Config{}).Start()
	t.Cleanup(srv.Close)
	prov := srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{ReadTimeout: 5 * time.Second}))
	att, err := attempts.New(attempts.Config{Pool: pool, Providers: map[string]providers.Provider{prov.Name(): prov}})
	require.NoError(t, err)
	po, err := payouts.New(payouts.Config{Pool: pool, Attempts: att, Provider: prov.Name()})
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
	return pool, att, p
}

// The audit sees damage across areas: a payout whose status lies about its
// attempt, and a reserve that no longer matches the open attempts (R22),
// are both reported, next to the ledger's own balance check.
func TestRunCatchesCrossAreaDamage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, p := openPayout(t)

	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())

	admin, err := pgx.Connect(ctx, testdb.AdminURL(t, pool))
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, `SET session_replication_role = replica`)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `UPDATE payouts SET status = 'succeeded' WHERE id = $1`, p.ID)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `UPDATE ledger_accounts SET balance = balance - 10 WHERE code = 'merchant/m1/reserved/BRL'`)
	require.NoError(t, err)

	res, err = audit.Run(ctx, pool)
	require.NoError(t, err)
	require.False(t, res.OK())
	found := map[string]bool{}
	for _, v := range res.Violations {
		found[v.Area+"/"+v.Check] = true
	}
	require.True(t, found["payouts/status"], res.Summary())
	require.True(t, found["payouts/reserved"], res.Summary())
	require.True(t, found["ledger/balance_mismatch"], res.Summary())
}

// Issue 13 finding 5 (R19, R22). A payout the provider reports paid after
// its attempt was resolved failed (the reserve went back) is a divergence:
// the merchant's money is held (package holds), and the audit reports it
// (attempts/diverged) until a human settles it, where it used to say all
// was well.
func TestRunReportsDivergence_R19_R22(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	clock := sim.NewManualClock(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	srv := sim.NewServer(sim.Config{Clock: clock.Now}).Start()
	t.Cleanup(srv.Close)
	prov := srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{ReadTimeout: 5 * time.Second}))
	att, err := attempts.New(attempts.Config{Pool: pool, Clock: clock, Providers: map[string]providers.Provider{prov.Name(): prov}})
	require.NoError(t, err)
	po, err := payouts.New(payouts.Config{Pool: pool, Attempts: att, Provider: prov.Name(), Clock: clock})
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
	a, err := att.Get(ctx, pool, *p.CurrentAttemptID)
	require.NoError(t, err)
	// 503 without executing: unknown; past the window the lookup finds
	// nothing: failed, the reserve goes back (R16, R22).
	require.NoError(t, srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: a.Reference}))
	r, err := att.Execute(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusUnknown, r.Attempt.Status)
	clock.Advance(time.Hour)
	rr, err := att.Resolve(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusFailed, rr.Attempt.Status)
	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())

	// Then the provider says it paid it (a webhook, a statement).
	_, err = att.ResolveByReference(ctx, attempts.ResolveInput{Reference: a.Reference, Provider: prov.Name(),
		Operation: providers.OpPixTransfer, Amount: "10.00", Currency: "BRL", State: providers.StateSucceeded,
		ProviderID: "op_late", Source: attempts.SourceWebhook, Actor: "evt_late"})
	require.NoError(t, err)
	res, err = audit.Run(ctx, pool)
	require.NoError(t, err)
	require.False(t, res.OK())
	require.Len(t, res.Violations, 1, res.Summary())
	require.Equal(t, "attempts/diverged", res.Violations[0].Area+"/"+res.Violations[0].Check)
	require.Contains(t, res.Violations[0].Detail, a.ID.String())
	got, err := po.Get(ctx, "m1", p.ID)
	require.NoError(t, err)
	require.Equal(t, "failed", string(got.Status), "the final status stays (R9)")
	require.True(t, got.Attempts[len(got.Attempts)-1].Review, "the attempt is in the review queue")
	require.True(t, got.NeedsAttention, "a diverged payout needs a human, though it is final")

	// The review-queue gauge counts it too.
	m := attempts.NewMetrics()
	att2, err := attempts.New(attempts.Config{Pool: pool, Clock: clock, Metrics: m,
		Providers: map[string]providers.Provider{prov.Name(): prov}})
	require.NoError(t, err)
	_, err = att2.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1.0, testutil.ToFloat64(m.ReviewQueueSize))

	// An operator books what happened and settles it: the evidence stays,
	// the audit, the queue, the gauge and needs_attention let it go.
	_, err = att.SettleDivergence(ctx, a.ID, "op_1", "", attempts.HoldNone)
	require.ErrorIs(t, err, attempts.ErrInvalid, "a reason is required")
	settled, err := att.SettleDivergence(ctx, a.ID, "op_1", "paid twice by the PSP's error; recovered from the recipient, see ticket 42", attempts.HoldRelease)
	require.NoError(t, err)
	require.NotNil(t, settled.DivergedAt, "the evidence stays")
	require.NotNil(t, settled.DivergenceSettledAt)
	require.Equal(t, attempts.StatusFailed, settled.Status)
	_, err = att.SettleDivergence(ctx, a.ID, "op_2", "again", attempts.HoldNone)
	require.ErrorIs(t, err, attempts.ErrNotDiverged, "settled once")
	res, err = audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
	got, err = po.Get(ctx, "m1", p.ID)
	require.NoError(t, err)
	require.False(t, got.NeedsAttention)
	_, err = att2.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, testutil.ToFloat64(m.ReviewQueueSize))
	queue, _, err := att.ReviewQueue(ctx, pool, attempts.ReviewQueueParams{})
	require.NoError(t, err)
	require.Empty(t, queue)
	_, err = pool.Exec(ctx, `UPDATE attempts SET divergence_settlement = 'rewritten' WHERE id = $1`, a.ID)
	require.Error(t, err, "a settlement never changes")
}

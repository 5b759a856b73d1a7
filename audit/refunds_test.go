package audit_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// refundWorld is a database with merchants m1 and m2 (each funded 500.00
// BRL and 500.00 USD), charges and refunds made through the services
// against the simulated PSP.
type refundWorld struct {
	t     *testing.T
	ctx   context.Context
	pool  *pgxpool.Pool
	clock *sim.ManualClock
	srv   *sim.Server
	att   *attempts.Service
	ch    *charges.Service
	po    *payouts.Service
}

func newRefundWorld(t *testing.T) *refundWorld {
	t.Helper()
	w := &refundWorld{t: t, ctx: context.Background(), pool: testdb.New(t)}
	w.clock = sim.NewManualClock(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC))
	w.srv = sim.NewServer(sim.Config{Clock: w.clock.Now}).Start()
	t.Cleanup(w.srv.Close)
	prov := w.srv.NewProvider(sim.WithHTTPSettings(providers.HTTPSettings{ReadTimeout: 5 * time.Second}))
	var err error
	w.att, err = attempts.New(attempts.Config{Pool: w.pool, Clock: w.clock, Providers: map[string]providers.Provider{prov.Name(): prov}})
	require.NoError(t, err)
	w.ch, err = charges.New(charges.Config{Pool: w.pool, Attempts: w.att, Provider: prov.Name(), Clock: w.clock})
	require.NoError(t, err)
	w.po, err = payouts.New(payouts.Config{Pool: w.pool, Attempts: w.att, Provider: prov.Name(), Charges: w.ch, Clock: w.clock})
	require.NoError(t, err)
	for _, m := range []string{"m1", "m2"} {
		_, err := merchants.Create(w.ctx, w.pool, m, "Loja "+m)
		require.NoError(t, err)
		for _, cur := range []string{"BRL", "USD"} {
			_, err = merchants.Fund(w.ctx, w.pool, merchants.Funding{MerchantID: m, Amount: money.MustParse("500.00", cur),
				Key: "fund-" + m + "-" + cur, Reason: "test", Actor: "test"})
			require.NoError(t, err)
		}
	}
	return w
}

// paidCharge makes and captures a card charge.
func (w *refundWorld) paidCharge(merchant, amount, cur string) charges.Charge {
	w.t.Helper()
	c, err := w.ch.Create(w.ctx, charges.ChargeRequest{MerchantID: merchant, Kind: charges.KindCard,
		Amount: money.MustParse(amount, cur), CardToken: "tok_visa"})
	require.NoError(w.t, err)
	r, err := w.att.Execute(w.ctx, *c.AttemptID)
	require.NoError(w.t, err)
	require.Equal(w.t, attempts.StatusSucceeded, r.Attempt.Status)
	c, err = w.ch.Get(w.ctx, merchant, c.ID)
	require.NoError(w.t, err)
	require.Equal(w.t, charges.StatusPaid, c.Status)
	return c
}

// refund opens a refund of c and, unless open, sends it: succeeded, or
// failed when fail is set (the PSP unavailable, then after the consistency
// window the lookup finds nothing: failed, the reserve released; R16, R22).
func (w *refundWorld) refund(c charges.Charge, amount string, open, fail bool) payouts.Payout {
	w.t.Helper()
	r, err := w.po.CreateRefund(w.ctx, payouts.RefundRequest{MerchantID: c.MerchantID, ChargeID: c.ID,
		Amount: money.MustParse(amount, c.Amount.Currency().Code())})
	require.NoError(w.t, err)
	if open {
		return r
	}
	if !fail {
		res, err := w.att.Execute(w.ctx, *r.CurrentAttemptID)
		require.NoError(w.t, err)
		require.Equal(w.t, attempts.StatusSucceeded, res.Attempt.Status)
		return r
	}
	a, err := w.att.Get(w.ctx, w.pool, *r.CurrentAttemptID)
	require.NoError(w.t, err)
	require.NoError(w.t, w.srv.AddFault(sim.FaultRule{Kind: sim.FaultUnavailable, Reference: a.Reference}))
	res, err := w.att.Execute(w.ctx, a.ID)
	require.NoError(w.t, err)
	require.Equal(w.t, attempts.StatusUnknown, res.Attempt.Status)
	w.clock.Advance(time.Hour)
	rr, err := w.att.Resolve(w.ctx, a.ID)
	require.NoError(w.t, err)
	require.Equal(w.t, attempts.StatusFailed, rr.Attempt.Status)
	return r
}

// tamper runs statements as a superuser with triggers off (the payouts and
// attempts guards refuse these changes to anyone else): damage from
// outside saldo, or a writer that bypassed its checks.
func (w *refundWorld) tamper(stmts ...string) {
	w.t.Helper()
	admin, err := pgx.Connect(w.ctx, testdb.AdminURL(w.t, w.pool))
	require.NoError(w.t, err)
	defer admin.Close(w.ctx)
	_, err = admin.Exec(w.ctx, `SET session_replication_role = replica`)
	require.NoError(w.t, err)
	for _, q := range stmts {
		_, err := admin.Exec(w.ctx, q)
		require.NoError(w.t, err, q)
	}
}

// requireOK runs the audit and requires that it holds.
func requireAuditOK(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	res, err := audit.Run(context.Background(), pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
}

// requireOnly runs the audit and requires that its only violations are of
// check (area/check), one per listed want, each detail containing every
// string of its want.
func requireOnly(t *testing.T, pool *pgxpool.Pool, check string, want ...[]string) {
	t.Helper()
	res, err := audit.Run(context.Background(), pool)
	require.NoError(t, err)
	var details []string
	for _, v := range res.Violations {
		require.Equal(t, check, v.Area+"/"+v.Check, "only %s is broken; the audit says: %s", check, res.Summary())
		details = append(details, v.Detail)
	}
	require.Len(t, details, len(want), res.Summary())
	for _, w := range want {
		found := false
		for _, d := range details {
			all := true
			for _, s := range w {
				all = all && strings.Contains(d, s)
			}
			found = found || all
		}
		require.True(t, found, "no %s violation names %v: %s", check, w, res.Summary())
	}
}

// A healthy database with refunds of every outcome (succeeded partial and
// full, failed and released, still open) in two currencies and two
// merchants passes refunds/charge_match (R21).
func TestAuditRefundsMatchTheirChargesOnAHealthyDatabase_R21(t *testing.T) {
	t.Parallel()
	w := newRefundWorld(t)
	c1 := w.paidCharge("m1", "100.00", "BRL")
	w.refund(c1, "30.00", false, false)
	w.refund(c1, "20.00", false, true)
	w.refund(c1, "10.00", true, false)
	c2 := w.paidCharge("m2", "50.00", "BRL")
	w.refund(c2, "50.00", false, false)
	cu := w.paidCharge("m1", "40.00", "USD")
	w.refund(cu, "15.00", false, false)

	var n int
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT count(*) FROM payouts WHERE kind = 'refund'`).Scan(&n))
	require.Equal(t, 5, n)
	requireAuditOK(t, w.pool)
	vs, err := audit.Refunds.Run(w.ctx, w.pool)
	require.NoError(t, err)
	require.Empty(t, vs)
}

// refunds/charge_match (R21, R22): merchant m2's refund, written against
// merchant m1's charge (one column of one row: the refund's charge_id), is
// m2's money returning m1's customer. Every other check holds: the refund's
// ledger effects match the refund row (effect_legs), and m1's charge is
// not over-refunded. The audit reports the row and the reserve's debit on
// m2's account, not m1's.
func TestAuditReportsARefundOfAnotherMerchantsCharge_R21_R22(t *testing.T) {
	t.Parallel()
	w := newRefundWorld(t)
	c1 := w.paidCharge("m1", "100.00", "BRL")
	c2 := w.paidCharge("m2", "100.00", "BRL")
	r := w.refund(c2, "25.00", false, false)
	requireAuditOK(t, w.pool)

	w.tamper(`UPDATE payouts SET charge_id = '` + c1.ID + `' WHERE id = '` + r.ID + `'`)
	var reserve int64
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT id FROM ledger_transactions WHERE cause_kind = 'payout_reserve' AND cause_id = $1`,
		r.CurrentAttemptID.String()).Scan(&reserve))
	requireOnly(t, w.pool, "refunds/charge_match",
		[]string{"refund " + r.ID + " (merchant m2, BRL", "of charge " + c1.ID + " (merchant m1, BRL"},
		// The reserve's two legs (m2 available -25, m2 reserved +25) and
		// the settlement's debit of m2's reserved account.
		[]string{"ledger transaction " + itoa(reserve) + " (payout_reserve", "-25", "merchant/m2/available/BRL"},
		[]string{"ledger transaction " + itoa(reserve) + " (payout_reserve", "merchant/m2/reserved/BRL"},
		[]string{"(payout_settle", "merchant/m2/reserved/BRL"})
}

// refunds/charge_match (R21): a USD refund written against a BRL charge.
// The refund's own effects are consistent USD ones and the BRL charge is
// not over-refunded by the sum payouts/refunds takes, so only the new
// check sees it.
func TestAuditReportsARefundInAnotherCurrencyThanItsCharge_R21(t *testing.T) {
	t.Parallel()
	w := newRefundWorld(t)
	brl := w.paidCharge("m1", "100.00", "BRL")
	usd := w.paidCharge("m1", "100.00", "USD")
	r := w.refund(usd, "10.00", true, false) // open: its reserve only
	requireAuditOK(t, w.pool)

	w.tamper(`UPDATE payouts SET charge_id = '` + brl.ID + `' WHERE id = '` + r.ID + `'`)
	requireOnly(t, w.pool, "refunds/charge_match",
		[]string{"refund " + r.ID + " (merchant m1, USD", "of charge " + brl.ID + " (merchant m1, BRL"},
		[]string{"(payout_reserve", "USD on merchant/m1/available/USD"},
		[]string{"(payout_reserve", "USD on merchant/m1/reserved/USD"})
}

// refunds/charge_match (R21): a refund of a charge that was never paid
// (its capture is still pending) pays out money never received;
// CreateRefund refuses it, a hand-written row is reported.
func TestAuditReportsARefundOfAnUnpaidCharge_R21(t *testing.T) {
	t.Parallel()
	w := newRefundWorld(t)
	paid := w.paidCharge("m1", "100.00", "BRL")
	pending, err := w.ch.Create(w.ctx, charges.ChargeRequest{MerchantID: "m1", Kind: charges.KindCard,
		Amount: money.MustParse("100.00", "BRL"), CardToken: "tok_visa"})
	require.NoError(t, err)
	_, err = w.po.CreateRefund(w.ctx, payouts.RefundRequest{MerchantID: "m1", ChargeID: pending.ID,
		Amount: money.MustParse("10.00", "BRL")})
	require.Error(t, err, "saldo refuses to refund an unpaid charge")
	r := w.refund(paid, "10.00", false, false)
	requireAuditOK(t, w.pool)

	w.tamper(`UPDATE payouts SET charge_id = '` + pending.ID + `' WHERE id = '` + r.ID + `'`)
	requireOnly(t, w.pool, "refunds/charge_match",
		[]string{"refund " + r.ID, "of charge " + pending.ID, "processing)"})
}

// refunds/charge_match (R21): a refund's attempt is a refund at its
// charge's provider (the only one that can return that charge). An attempt
// rewritten to another provider is reported (effect_legs also sees its
// settlement credit the old provider's clearing account).
func TestAuditReportsARefundAttemptAtAnotherProvider_R21(t *testing.T) {
	t.Parallel()
	w := newRefundWorld(t)
	c := w.paidCharge("m1", "100.00", "BRL")
	r := w.refund(c, "10.00", true, false) // open: nothing settled yet
	requireAuditOK(t, w.pool)

	w.tamper(`UPDATE attempts SET provider = 'elsewhere' WHERE id = '` + r.CurrentAttemptID.String() + `'`)
	requireOnly(t, w.pool, "refunds/charge_match",
		[]string{"refund " + r.ID, "attempt " + r.CurrentAttemptID.String(), "at provider elsewhere, the charge's provider is " + c.Provider})
}

// The check lists at most ledger.MaxReportedViolations and says how many
// more it found, as ledger.Verify does.
func TestAuditRefundsListIsBounded(t *testing.T) {
	t.Parallel()
	w := newRefundWorld(t)
	c1 := w.paidCharge("m1", "100.00", "BRL")
	c2 := w.paidCharge("m2", "100.00", "BRL")
	r := w.refund(c2, "25.00", false, false)
	// Many refunds of m2 pointing at m1's charge: copies of r's row.
	w.tamper(`INSERT INTO payouts (id, merchant_id, kind, operation, provider, amount, currency, charge_id, status,
			created_at, updated_at)
		 SELECT 'po_' || md5(g::text), merchant_id, kind, operation, provider, 0.01, currency, '` + c1.ID + `', 'failed',
			created_at, updated_at
		 FROM payouts, generate_series(1, ` + itoa(ledger.MaxReportedViolations+4) + `) g WHERE id = '` + r.ID + `'`)
	vs, err := audit.Refunds.Run(w.ctx, w.pool)
	require.NoError(t, err)
	require.Equal(t, ledger.MaxReportedViolations+1, len(vs), "listed, then one line for the rest")
	require.Equal(t, "... and 4 more not listed", vs[len(vs)-1].Detail)
}

func itoa[T int | int64](n T) string { return strconv.FormatInt(int64(n), 10) }

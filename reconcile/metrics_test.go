package reconcile_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
	"github.com/saldo/saldo/reconcile"
)

// saldo_reconcile_divergences{provider,kind} counts the open divergences at
// each scrape, one series per configured provider and kind (bounded
// labels), and an operator's resolution shows at the next scrape.
func TestDivergencesMetric_R19(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := e.paid("10.00")
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieDuplicate, Reference: a.Reference}))
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: "",
		ID: "op_foreign", Operation: providers.OpPixTransfer, Amount: "1.00", Currency: "BRL", At: day.Add(time.Hour)}))
	e.clock.Set(day.Add(51 * time.Hour))
	e.run()
	reg := prometheus.NewRegistry()
	reg.MustRegister(e.rec.Collector())
	scrape := func() map[string]float64 {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		out := map[string]float64{}
		for _, mf := range mfs {
			require.Equal(t, "saldo_reconcile_divergences", mf.GetName())
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				require.Equal(t, "sim", labels["provider"])
				out[labels["kind"]] = m.GetGauge().GetValue()
			}
		}
		return out
	}
	got := scrape()
	require.Len(t, got, len(reconcile.Kinds))
	require.Equal(t, 1.0, got["double_payment"])
	require.Equal(t, 1.0, got["unknown_to_us"], "a line with no reference, matched by provider id to nothing")
	require.Equal(t, 1.0, got["ledger_totals"])
	require.Zero(t, got["paid_but_failed"])
	list, _, err := reconcile.List(e.ctx, e.pool, reconcile.Filter{Kind: reconcile.KindDoublePayment}, "", 10)
	require.NoError(t, err)
	_, _, err = reconcile.Resolve(e.ctx, e.pool, list[0].ID, "key_op", "reversed", e.clock.Now())
	require.NoError(t, err)
	require.Zero(t, scrape()["double_payment"])
}

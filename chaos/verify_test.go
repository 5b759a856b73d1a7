package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

func runOnce(bin string, env []string, args ...string) (string, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// openOperations counts payouts and charges neither final nor in review.
func openOperations(ctx context.Context, db *pgxpool.Pool) (int, error) {
	var n int
	err := db.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM payouts p LEFT JOIN attempts a ON a.id = p.current_attempt_id
		  WHERE p.status = 'processing' AND NOT coalesce(a.review, false))
		+ (SELECT count(*) FROM charges c LEFT JOIN attempts a ON a.id = c.attempt_id
		  WHERE c.status IN ('processing', 'awaiting_payment') AND NOT coalesce(a.review, false))`).Scan(&n)
	return n, err
}

func describeOpen(ctx context.Context, db *pgxpool.Pool) []string {
	rows, err := db.Query(ctx, `
		SELECT 'payout ' || p.id || ' ' || p.kind || ' attempt ' || coalesce(a.id::text, '-') || ' ' || coalesce(a.status, '-')
		       || ' calls ' || coalesce(a.call_count, 0) || '/' || coalesce(a.calls_recorded, 0) || ' lookups ' || coalesce(a.lookup_count, 0)
		       || ' provider_state ' || coalesce(a.provider_state, '-') || ' next_send ' || coalesce(a.next_send_at::text, '-')
		       || ' next_lookup ' || coalesce(a.next_lookup_at::text, '-') || ' last_error ' || coalesce(left(a.last_error, 120), '-')
		       || ' jobs ' || coalesce((SELECT string_agg(j.kind || ':' || j.state || ':' || coalesce(j.scheduled_at::text, ''), ',')
		            FROM river_job j WHERE j.args->>'attempt_id' = a.id::text), '-')
		FROM payouts p LEFT JOIN attempts a ON a.id = p.current_attempt_id
		WHERE p.status = 'processing' AND NOT coalesce(a.review, false)
		UNION ALL
		SELECT 'charge ' || c.id || ' ' || c.kind || ' ' || c.status || ' attempt ' || coalesce(a.id::text, '-') || ' ' || coalesce(a.status, '-')
		       || ' calls ' || coalesce(a.call_count, 0) || '/' || coalesce(a.calls_recorded, 0) || ' lookups ' || coalesce(a.lookup_count, 0)
		       || ' provider_state ' || coalesce(a.provider_state, '-') || ' last_error ' || coalesce(left(a.last_error, 120), '-')
		       || ' jobs ' || coalesce((SELECT string_agg(j.kind || ':' || j.state || ':' || coalesce(j.scheduled_at::text, ''), ',')
		            FROM river_job j WHERE j.args->>'attempt_id' = a.id::text), '-')
		FROM charges c LEFT JOIN attempts a ON a.id = c.attempt_id
		WHERE c.status IN ('processing', 'awaiting_payment') AND NOT coalesce(a.review, false)
		LIMIT 20`)
	if err != nil {
		return []string{err.Error()}
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if rows.Scan(&s) == nil {
			out = append(out, s)
		}
	}
	return out
}

var faultRE = regexp.MustCompile(`msg="sim: fault" kind=(\S+)`)

// faultCaused matches the errors an injected fault explains: a database
// connection cut, refused or lost while PostgreSQL restarts.
var faultCaused = regexp.MustCompile(`unexpected EOF|failed to connect|conn closed|connection reset|broken pipe|` +
	`use of closed network connection|the database system is|terminating connection|server closed|SQLSTATE 57P|i/o timeout|` +
	`context canceled|context deadline exceeded|timeout: context`)

// apiFailures reads the saldo processes' logs: every request the API failed
// (5xx) and its error, split into those an injected fault explains and the
// others (a bug a client can trigger).
func apiFailures(logPaths []string) (explained int, others []string) {
	for _, path := range logPaths {
		f, err := os.Open(path)
		if err != nil {
			others = append(others, err.Error())
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.Contains(line, `"msg":"api: request failed"`) && !strings.Contains(line, `"msg":"api: panic"`) {
				continue
			}
			var rec struct {
				Method, Path, Error string
			}
			_ = json.Unmarshal([]byte(line), &rec)
			if rec.Error != "" && faultCaused.MatchString(rec.Error) {
				explained++
				continue
			}
			others = append(others, line[:min(len(line), 400)])
		}
		f.Close()
	}
	return explained, others
}

// simFaults counts the faults the sim logged, by kind.
func simFaults(logPath string) string {
	f, err := os.Open(logPath)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	counts := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if m := faultRE.FindStringSubmatch(sc.Text()); m != nil {
			counts[m[1]]++
		}
	}
	var parts []string
	for k, v := range counts {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// verify proves the invariants after the run and fills the table.
func (e *env) verify(ctx context.Context, res *runResult, st *stats, ld *loader) {
	fail := func(format string, args ...any) {
		res.violations = append(res.violations, fmt.Sprintf(format, args...))
	}
	q := func(sql string, args ...any) int {
		var n int
		if err := e.direct.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			fail("query %q: %v", sql, err)
		}
		return n
	}
	st.mu.Lock()
	reqs := append([]*request(nil), st.requests...)
	res.violations = append(res.violations, st.violations...)
	fiveXX := st.fiveXXBody
	st.mu.Unlock()

	// Requests and answers.
	byKind := map[string][3]int{} // 2xx, 4xx, unanswered
	for _, r := range reqs {
		c := byKind[r.Kind]
		switch {
		case r.Status/100 == 2:
			c[0]++
		case r.Status == 0:
			c[2]++
		default:
			c[1]++
		}
		byKind[r.Kind] = c
	}
	var kinds []string
	for k := range byKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var parts []string
	total := [3]int{}
	for _, k := range kinds {
		c := byKind[k]
		parts = append(parts, fmt.Sprintf("%s %d/%d/%d", k, c[0], c[1], c[2]))
		for i := range 3 {
			total[i] += c[i]
		}
	}
	res.row("client requests (2xx / refused 4xx / no answer)", "%d / %d / %d", total[0], total[1], total[2])
	res.row("  by kind (2xx/4xx/no answer)", "%s", strings.Join(parts, "; "))
	refusals := map[string]int{}
	for _, r := range reqs {
		if r.Status/100 == 4 {
			var pb struct {
				Type  string `json:"type"`
				Code  string `json:"code"`
				Field string `json:"field"`
			}
			_ = json.Unmarshal([]byte(r.Answer), &pb)
			code := pb.Code
			if code == "" {
				code = strings.TrimPrefix(pb.Type, "https://saldo.dev/problems/")
			}
			refusals[fmt.Sprintf("%s %d %s", r.Kind, r.Status, code)]++
		}
	}
	var rparts []string
	for k, v := range refusals {
		rparts = append(rparts, fmt.Sprintf("%s x%d", k, v))
	}
	sort.Strings(rparts)
	res.row("  refusals (kind status problem)", "%s", strings.Join(rparts, "; "))
	res.row("HTTP exchanges / transport errors / 5xx retried / 409-429 waited", "%d / %d / %d / %d",
		st.exchanges.Load(), st.transportErrs.Load(), st.fiveXX.Load(), st.inProgress.Load())
	res.row("same-key retries / concurrent same-key pairs / key reused with another body", "%d / %d / %d",
		st.replays.Load(), st.concurrentDups.Load(), st.keyReuses.Load())
	res.row("Pix charges paid by the payer / payer gave up", "%d / %d", st.pixPaid.Load(), st.pixPayGaveUp.Load())
	if len(fiveXX) > 0 {
		var ks []string
		for k, v := range fiveXX {
			ks = append(ks, fmt.Sprintf("%s x%d", strings.ReplaceAll(k, "\n", " "), v))
		}
		sort.Strings(ks)
		if len(ks) > 6 {
			ks = append(ks[:6], fmt.Sprintf("... %d more", len(ks)-6))
		}
		res.row("5xx answers seen by clients (retried)", "%s", strings.Join(ks, " | "))
	}

	var logs []string
	for _, c := range e.procs {
		logs = append(logs, c.logPath)
	}
	explained, others := apiFailures(logs)
	for _, o := range others {
		fail("API failure not explained by an injected fault: %s", o)
	}
	res.row("API 5xx logged: explained by an injected fault / other", "%d / %d", explained, len(others))

	// Every request answered 2xx exists; no refused request left anything.
	missing, leaked := 0, 0
	for _, r := range reqs {
		switch {
		case r.Status/100 == 2:
			var n int
			switch r.Kind {
			case "pix_transfer", "bank_payout", "refund":
				n = q(`SELECT count(*) FROM payouts WHERE id = $1 AND merchant_id = $2`, r.ID, r.Merchant)
			case "split":
				n = q(`SELECT count(*) FROM splits WHERE id = $1 AND merchant_id = $2`, r.ID, r.Merchant)
			case "card_charge", "pix_charge":
				n = q(`SELECT count(*) FROM charges WHERE id = $1 AND merchant_id = $2`, r.ID, r.Merchant)
			case "funding":
				n = q(`SELECT count(*) FROM ledger_transactions WHERE id::text = $1`, r.ID)
			default:
				n = 0
			}
			if n != 1 {
				missing++
				fail("answered %d but not in the database: %s %s key %s id %q", r.Status, r.Kind, r.Path, r.Key, r.ID)
			}
		case r.Status/100 == 4 && r.Key != "":
			// A refused request created nothing under its key.
			n := q(`SELECT count(*) FROM payout_requests WHERE merchant_id = $1 AND client_key = $2`, r.Merchant, r.Key) +
				q(`SELECT count(*) FROM charge_requests WHERE merchant_id = $1 AND client_key = $2`, r.Merchant, r.Key)
			if n != 0 {
				leaked++
				fail("refused with %d but something was created under its key: %s %s key %s", r.Status, r.Kind, r.Path, r.Key)
			}
		}
	}
	res.row("2xx answers missing from the database / refused requests that created something", "%d / %d", missing, leaked)

	// Final statuses.
	statusLine := func(sql string) string {
		rows, err := e.direct.Query(ctx, sql)
		if err != nil {
			fail("%v", err)
			return ""
		}
		defer rows.Close()
		var parts []string
		for rows.Next() {
			var k string
			var n int
			if rows.Scan(&k, &n) == nil {
				parts = append(parts, fmt.Sprintf("%s %d", k, n))
			}
		}
		return strings.Join(parts, ", ")
	}
	res.row("payouts by kind and status", "%s", statusLine(`SELECT kind || ' ' || status, count(*) FROM payouts GROUP BY 1 ORDER BY 1`))
	res.row("charges by kind and status", "%s", statusLine(`SELECT kind || ' ' || status, count(*) FROM charges GROUP BY 1 ORDER BY 1`))
	res.row("attempts by status (in review)", "%s", statusLine(`SELECT status || CASE WHEN review THEN ' (review)' ELSE '' END, count(*)
		FROM attempts GROUP BY 1 ORDER BY 1`))
	res.row("operations in review", "%d", q(`SELECT
		(SELECT count(*) FROM payouts p JOIN attempts a ON a.id = p.current_attempt_id WHERE p.status = 'processing' AND a.review)
		+ (SELECT count(*) FROM charges c JOIN attempts a ON a.id = c.attempt_id WHERE c.status IN ('processing', 'awaiting_payment') AND a.review)`))

	// Provider-side operations per intent, from the sim's oracle.
	// The oracle of a long run is several MiB: lift the adapter's 1 MiB cap.
	simc := sim.NewProvider(e.simURL, sim.WithHTTPSettings(providers.HTTPSettings{MaxBodyBytes: 512 << 20}))
	ops, err := simc.AllOperations(ctx)
	if err != nil {
		fail("sim oracle: %v (the checks against the provider are not run)", err)
	}
	oracleOK := err == nil
	byRef := map[string][]sim.OracleOperation{}
	for _, o := range ops {
		byRef[o.Reference] = append(byRef[o.Reference], o)
	}
	rows, err := e.direct.Query(ctx, `SELECT a.direction, a.kind, a.subject_id, a.reference,
		coalesce(p.status, c.status, '') FROM attempts a
		LEFT JOIN payouts p ON a.direction = 'out' AND p.id = a.subject_id
		LEFT JOIN charges c ON a.direction = 'in' AND c.id = a.subject_id`)
	if err != nil {
		fail("%v", err)
		return
	}
	type intent struct {
		kind, status string
		moving       int
		ops          int
	}
	intents := map[string]*intent{}
	known := map[string]bool{}
	for rows.Next() {
		var dir, kind, subject, ref, status string
		if err := rows.Scan(&dir, &kind, &subject, &ref, &status); err != nil {
			fail("%v", err)
			break
		}
		known[ref] = true
		in := intents[dir+":"+subject]
		if in == nil {
			in = &intent{kind: kind, status: status}
			intents[dir+":"+subject] = in
		}
		for _, o := range byRef[ref] {
			in.ops++
			if o.MoneyMoving {
				in.moving++
			}
		}
	}
	rows.Close()
	hist := map[int]int{}
	double, paidNotRecorded, recordedNotPaid := 0, 0, 0
	for id, in := range intents {
		if !oracleOK {
			break
		}
		hist[min(in.moving, 2)]++
		if in.moving > 1 {
			double++
			fail("DOUBLE PAYMENT: %s (%s, %s) has %d money-moving operations at the provider", id, in.kind, in.status, in.moving)
		}
		final := in.status
		switch {
		case (final == "succeeded" || final == "paid") && in.moving == 0:
			recordedNotPaid++
			fail("%s (%s) is %s but the provider moved no money", id, in.kind, final)
		case (final == "failed" || final == "expired") && in.moving > 0:
			paidNotRecorded++
			fail("%s (%s) is %s but the provider moved money", id, in.kind, final)
		}
	}
	unknownToUs := 0
	for ref := range byRef {
		if !known[ref] {
			unknownToUs++
			fail("provider operation for a reference saldo does not know: %s", ref)
		}
	}
	res.row("provider operations (oracle) / intents", "%d / %d", len(ops), len(intents))
	res.row("intents with 0 / 1 / more than 1 money-moving provider operation", "%d / %d / %d", hist[0], hist[1], hist[2])
	res.row("double payments (more than 1 per intent)", "%d", double)
	res.row("final status vs provider: succeeded without money / failed with money / unknown references", "%d / %d / %d",
		recordedNotPaid, paidNotRecorded, unknownToUs)

	// audit.Run: every invariant.
	ar, err := audit.Run(ctx, e.direct)
	if err != nil {
		fail("audit.Run: %v", err)
	} else {
		res.row("audit.Run", "%s", strings.SplitN(ar.Summary(), "\n", 2)[0])
		for _, v := range ar.Violations {
			fail("audit: %s", v)
		}
	}

	// Per merchant: reserved = open outgoing attempts; balance conserved.
	type bal struct{ reserved, openOut, total, expected decimal.Decimal }
	bals := map[string]*bal{}
	for _, m := range ld.merchants {
		bals[m.id] = &bal{}
	}
	scanMap := func(sql string, set func(b *bal, d decimal.Decimal)) {
		rows, err := e.direct.Query(ctx, sql)
		if err != nil {
			fail("%v", err)
			return
		}
		defer rows.Close()
		for rows.Next() {
			var m, v string
			if err := rows.Scan(&m, &v); err != nil {
				fail("%v", err)
				return
			}
			if b := bals[m]; b != nil {
				set(b, decimal.RequireFromString(v))
			}
		}
	}
	scanMap(`SELECT owner_id, sum(balance)::text FROM ledger_accounts WHERE owner_kind = 'merchant' AND purpose = 'reserved' GROUP BY 1`,
		func(b *bal, d decimal.Decimal) { b.reserved = d })
	scanMap(`SELECT p.merchant_id, sum(p.amount)::text FROM attempts a JOIN payouts p ON p.id = a.subject_id AND a.direction = 'out'
		WHERE a.status IN ('pending', 'unknown') GROUP BY 1`, func(b *bal, d decimal.Decimal) { b.openOut = d })
	scanMap(`SELECT owner_id, sum(balance)::text FROM ledger_accounts WHERE owner_kind = 'merchant' GROUP BY 1`,
		func(b *bal, d decimal.Decimal) { b.total = d })
	// Expected: what clients funded (2xx) + net of paid charges + splits
	// received - succeeded payouts, refunds and split legs.
	// A funding the client got no answer for may have happened (its answer
	// lost): the ledger tells, by its idempotency key (funding:<merchant>:
	// <API key id>:<Idempotency-Key>).
	fundedUnanswered := 0
	for _, r := range reqs {
		if r.Kind != "funding" {
			continue
		}
		switch {
		case r.Status/100 == 2:
			bals[r.Merchant].expected = bals[r.Merchant].expected.Add(decimal.RequireFromString(r.Amount))
		case r.Status == 0:
			if q(`SELECT count(*) FROM ledger_transactions WHERE idempotency_key LIKE 'funding:' || $1 || ':%:' || $2`,
				r.Merchant, r.Key) == 1 {
				fundedUnanswered++
				bals[r.Merchant].expected = bals[r.Merchant].expected.Add(decimal.RequireFromString(r.Amount))
			}
		}
	}
	scanMap(`SELECT merchant_id, sum(merchant_net)::text FROM charges WHERE status = 'paid' GROUP BY 1`,
		func(b *bal, d decimal.Decimal) { b.expected = b.expected.Add(d) })
	scanMap(`SELECT s.recipient_id, sum(s.amount)::text FROM charge_splits s JOIN charges c ON c.id = s.charge_id
		WHERE c.status = 'paid' GROUP BY 1`, func(b *bal, d decimal.Decimal) { b.expected = b.expected.Add(d) })
	scanMap(`SELECT merchant_id, sum(amount)::text FROM payouts WHERE status = 'succeeded' GROUP BY 1`,
		func(b *bal, d decimal.Decimal) { b.expected = b.expected.Sub(d) })
	var mparts []string
	reservedBad, drift := 0, decimal.Zero
	for _, m := range ld.merchants {
		b := bals[m.id]
		if !b.reserved.Equal(b.openOut) {
			reservedBad++
			fail("merchant %s: reserved %s but open outgoing attempts %s", m.id, b.reserved, b.openOut)
		}
		if !b.total.Equal(b.expected) {
			drift = drift.Add(b.total.Sub(b.expected).Abs())
			fail("merchant %s: balance %s but fundings + paid charges - succeeded payouts = %s", m.id, b.total, b.expected)
		}
		mparts = append(mparts, fmt.Sprintf("%s reserved %s = open %s, balance %s", m.id, b.reserved.StringFixed(2),
			b.openOut.StringFixed(2), b.total.StringFixed(2)))
	}
	res.row("fundings unanswered (client gave up) but applied", "%d", fundedUnanswered)
	res.row("per merchant: reserved = open outgoing attempts", "%d mismatches (%s)", reservedBad, strings.Join(mparts, "; "))

	// Each operation's ledger effect matches its final status: per attempt,
	// one reserve (its own or carried from the payout's previous attempt),
	// one settle if it succeeded, one release (or carry) if it failed,
	// nothing more; per payout, one settle if it succeeded and none
	// otherwise; per charge, one credit if paid and none otherwise.
	effectSQL := []string{`
		WITH carried AS (
			SELECT metadata->>'to_attempt_id' AS attempt_id, count(*) AS n
			FROM ledger_transactions WHERE cause_kind = 'payout_reserve_carry' GROUP BY 1)
		SELECT 'attempt ' || a.id || ' ' || a.status FROM attempts a JOIN payouts p ON p.id = a.subject_id AND a.direction = 'out'
		LEFT JOIN ledger_transactions t ON t.cause_id = a.id::text
		LEFT JOIN carried c ON c.attempt_id = a.id::text
		GROUP BY a.id, a.status
		HAVING count(*) FILTER (WHERE t.cause_kind = 'payout_reserve') + coalesce(min(c.n), 0) <> 1
		    OR count(*) FILTER (WHERE t.cause_kind = 'payout_settle') <> (a.status = 'succeeded')::int
		    OR count(*) FILTER (WHERE t.cause_kind IN ('payout_release', 'payout_reserve_carry')) <> (a.status = 'failed')::int`, `
		SELECT 'payout ' || p.id || ' ' || p.status FROM payouts p JOIN attempts a ON a.subject_id = p.id AND a.direction = 'out'
		LEFT JOIN ledger_transactions t ON t.cause_id = a.id::text AND t.cause_kind = 'payout_settle'
		GROUP BY p.id, p.status HAVING count(t.id) <> (p.status = 'succeeded')::int`, `
		SELECT 'charge ' || c.id || ' ' || c.status FROM charges c
		LEFT JOIN ledger_transactions t ON t.cause_kind = 'charge_credit' AND t.cause_id = c.id
		GROUP BY c.id, c.status HAVING count(t.id) <> (c.status = 'paid')::int`}
	effects := 0
	for _, sql := range effectSQL {
		rows, err := e.direct.Query(ctx, sql)
		if err != nil {
			fail("%v", err)
			continue
		}
		for rows.Next() {
			var s string
			if rows.Scan(&s) == nil {
				effects++
				fail("ledger effect does not match the final status: %s", s)
			}
		}
		rows.Close()
	}
	res.row("operations whose ledger effect does not match their status", "%d", effects)

	// No attempt unknown without a resolver job or a review flag.
	strays := q(`SELECT count(*) FROM attempts WHERE status = 'unknown' AND NOT review AND NOT EXISTS (
		SELECT 1 FROM river_job j WHERE j.kind = 'attempts.resolve'
		AND j.state IN ('available', 'pending', 'running', 'retryable', 'scheduled') AND j.args->>'attempt_id' = attempts.id::text)`)
	if strays != 0 {
		fail("%d unknown attempts with neither a resolver job nor a review flag", strays)
	}
	res.row("unknown attempts without resolver job or review flag", "%d", strays)

	// Totals conserved: the ledger sums to zero per currency, merchants'
	// balances follow from what happened, and the provider's net money flow
	// equals saldo's.
	ledgerSum := q(`SELECT count(*) FROM (SELECT currency FROM ledger_accounts GROUP BY currency HAVING sum(balance) <> 0) x`)
	if ledgerSum != 0 {
		fail("the ledger does not sum to zero in %d currencies", ledgerSum)
	}
	provNet := decimal.Zero
	for _, o := range ops {
		if !o.MoneyMoving {
			continue
		}
		a := decimal.RequireFromString(o.Amount)
		switch o.Operation.Operation {
		case "pix_transfer", "bank_payout", "refund":
			provNet = provNet.Sub(a)
		default:
			provNet = provNet.Add(a)
		}
	}
	var saldoNetS string
	if err := e.direct.QueryRow(ctx, `SELECT ((SELECT coalesce(sum(amount), 0) FROM charges WHERE status = 'paid')
		- (SELECT coalesce(sum(amount), 0) FROM payouts WHERE status = 'succeeded'))::text`).Scan(&saldoNetS); err != nil {
		fail("%v", err)
		saldoNetS = "0"
	}
	saldoNet := decimal.RequireFromString(saldoNetS)
	// Operations in review may or may not have moved money at the provider:
	// they are excluded from both sides.
	reviewNet := decimal.Zero
	rrows, err := e.direct.Query(ctx, `SELECT a.reference, a.direction FROM attempts a WHERE a.status IN ('pending', 'unknown')`)
	if err == nil {
		for rrows.Next() {
			var ref, dir string
			if rrows.Scan(&ref, &dir) == nil {
				for _, o := range byRef[ref] {
					if o.MoneyMoving {
						a := decimal.RequireFromString(o.Amount)
						if dir == "out" {
							reviewNet = reviewNet.Sub(a)
						} else {
							reviewNet = reviewNet.Add(a)
						}
					}
				}
			}
		}
		rrows.Close()
	}
	flowDrift := provNet.Sub(reviewNet).Sub(saldoNet)
	if !oracleOK {
		flowDrift = decimal.Zero // not measured; reported above
	}
	if !flowDrift.IsZero() {
		fail("provider net flow %s (without open attempts %s) but saldo's paid charges - succeeded payouts = %s", provNet,
			provNet.Sub(reviewNet), saldoNet)
	}
	res.row("ledger drift: merchant balances vs history / provider net flow vs saldo / ledger sum", "%s / %s / %d currencies off",
		drift.StringFixed(2), flowDrift.Abs().StringFixed(2), ledgerSum)
	_ = http.StatusOK
	_ = time.Second
}

// renderTables prints the sub-runs side by side as a Markdown table.
func renderTables(p profile, runs map[string]*runResult) string {
	modes := []string{}
	for _, m := range []string{"idempotent", "no-idempotency"} {
		if runs[m] != nil {
			modes = append(modes, m)
		}
	}
	var labels []string
	seen := map[string]bool{}
	for _, m := range modes {
		for _, r := range runs[m].rows {
			if !seen[r[0]] {
				seen[r[0]] = true
				labels = append(labels, r[0])
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "chaos run (%s form), %s\n\n", p.name, time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	b.WriteString("| |")
	for _, m := range modes {
		b.WriteString(" " + m + " |")
	}
	b.WriteString("\n|---|")
	for range modes {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, l := range labels {
		b.WriteString("| " + l + " |")
		for _, m := range modes {
			v := ""
			for _, r := range runs[m].rows {
				if r[0] == l {
					v = r[1]
				}
			}
			b.WriteString(" " + strings.ReplaceAll(v, "|", "/") + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

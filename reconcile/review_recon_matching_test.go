package reconcile_test

// Hostile review of package reconcile (branch rv-recon). Each test below
// FAILS on the code it was written against and names the behaviour that
// should hold; the comment says what is wrong, why it matters and a fix.

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
	"github.com/saldo/saldo/reconcile"
)

// FINDING (critical, R9/R19): a double payment of an attempt that is still
// open when the run sees it is never handed to the attempts core.
//
// The statement lists two money-moving operations (two provider ids) under
// the reference of an unknown attempt. matchGroup stores a double_payment
// (fingerprint "ref:<ref>|id:A,id:B") and then reports the first operation
// to the attempts core, which settles the attempt as succeeded with id A.
// The second operation B is never reported: the attempt ends succeeded with
// no divergence, not in review, no needs_attention, no payout.diverged, and
// attempts.Verify does not list it. R19 says a double_payment under a
// succeeded attempt's reference is recorded on the attempt as a
// second_operation divergence; the same money left twice whether the
// attempt was open or succeeded when the run met it. The daily job never
// re-runs a day (RunWorker skips a day a job run finished), so nothing
// later hands it over either: only the reconciliation row, which an
// operator may resolve, knows that the merchant was paid twice.
//
// Fix: after report() resolved the open attempt with operation A, hand
// every other money-moving operation of the group to the attempts core
// through report() as the succeeded branch does (ErrProviderIDMismatch is
// the expected answer: the core records a second_operation divergence),
// and fingerprint each extra operation with opFingerprint(ref, x) so a
// re-run (which takes the succeeded branch) finds the same row (see the
// next test).
func TestOpenAttemptsSecondOperationIsTheAttemptsDivergence_R9_R19(t *testing.T) {
	t.Parallel()
	e := setup(t)
	_, unknown := e.withFault("14.00", sim.FaultErrorAfter)
	require.Equal(t, attempts.StatusUnknown, unknown.Status)
	// The statement lists the operation twice, the copy under another id.
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieDuplicate, Reference: unknown.Reference}))
	e.clock.Set(day.Add(51 * time.Hour))
	e.run()
	require.Len(t, byKind(e.all())[reconcile.KindDoublePayment], 1, "the run saw the double payment")

	a, err := e.att.Get(e.ctx, e.pool, unknown.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, a.Status, "the statement resolved the unknown attempt")
	require.Equal(t, 1, e.settles(a), "settled once")
	require.NotNil(t, a.DivergedAt, "the second operation under the attempt's reference is not recorded on the attempt: "+
		"no review, no needs_attention, no *.diverged, attempts.Verify is clean while the merchant was paid twice")
	require.True(t, a.Review)
	kind, err := attempts.DivergenceKind(e.ctx, e.pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.DivergenceSecondOperation, kind)
}

// FINDING (medium, R19 "a re-run stores nothing twice"): the same double
// payment is stored as two critical divergences, one per run, because the
// fingerprint depends on whether the attempt was open when the run met it.
//
// Run 1 meets the attempt unknown: double_payment fingerprint
// "ref:<ref>|id:A,id:B". It resolves the attempt succeeded. An operator
// books the second payment and resolves the divergence. A re-run of the
// same day with the same statement meets the attempt succeeded: the
// succeeded branch fingerprints the extra operation "ref:<ref>|id:B", a
// new row: a new open critical divergence, a new alert, `saldo audit
// verify` failing again for money already booked.
//
// Fix: the open branch fingerprints each extra operation like the
// succeeded branch (opFingerprint(ref, extra line)), so both runs name
// the same row.
func TestRerunAfterResolvedDoublePaymentStoresNoSecondCritical_R19(t *testing.T) {
	t.Parallel()
	e := setup(t)
	_, unknown := e.withFault("14.00", sim.FaultErrorAfter)
	require.Equal(t, attempts.StatusUnknown, unknown.Status)
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieDuplicate, Reference: unknown.Reference}))
	e.clock.Set(day.Add(51 * time.Hour))
	e.run()
	for _, d := range e.all() {
		if d.Open() {
			_, changed, err := reconcile.Resolve(e.ctx, e.pool, d.ID, "op_1", "second payment booked with the PSP", e.clock.Now())
			require.NoError(t, err)
			require.True(t, changed)
		}
	}
	alerts := len(e.alerts)
	again := e.run()
	var open []string
	for _, d := range e.all() {
		if d.Open() && d.Severity == reconcile.SeverityCritical {
			open = append(open, string(d.Kind)+": "+d.Detail)
		}
	}
	require.Empty(t, open, "the re-run of an unchanged statement re-opened the resolved double payment as a new divergence")
	require.Zero(t, again.NewDivergences)
	require.Equal(t, alerts, len(e.alerts), "a second critical alert for the same double payment")
}

// FINDING (high, R19): one statement line holding text PostgreSQL cannot
// store (a NUL) fails the whole run, every time: the day's critical
// divergences are never reported.
//
// The statement is not saldo's text (a Stripe object's metadata, a PSP's
// fields). Service.run passes every line's reference to byReference as a
// text[] parameter before anything else; PostgreSQL refuses the NUL
// (22021) and the run fails before a single group is matched. Here the
// same statement lists a payment for an attempt saldo failed (its
// reserve was released: paid_but_failed, critical); it is never
// reported, the attempt never gets its divergence, the job retries into
// the same error forever. Webhooks already refuse such an item alone and
// apply the others (R17, providers.WebhookEvent.Storable).
//
// Fix: check each statement line when it is read (Service.statement): a
// line with text PostgreSQL cannot store (NUL, invalid UTF-8) is reported
// on its own (e.g. unknown_to_us with the text escaped, or a dedicated
// refusal in the run's error list) and the other lines are reconciled.
func TestUnstorableStatementLineDoesNotBlindTheDay_R19(t *testing.T) {
	t.Parallel()
	e := setup(t)
	_, failed := e.withFault("15.00", sim.FaultUnavailable)
	e.clock.Advance(time.Hour)
	rr, err := e.att.Resolve(e.ctx, failed.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusFailed, rr.Attempt.Status)
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: "bad\x00ref",
		Operation: providers.OpPixTransfer, Amount: "9.99", Currency: "BRL", At: day.Add(13 * time.Hour)}))
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: failed.Reference, ID: "op_paid_late",
		Operation: providers.OpPixTransfer, Amount: "15.00", Currency: "BRL", At: day.Add(14 * time.Hour)}))
	e.clock.Set(day.Add(51 * time.Hour))

	run, err := e.rec.Run(e.ctx, e.prov.Name(), day, reconcile.RunOptions{TriggeredBy: "test"})
	require.NoError(t, err, "one unstorable line failed the whole run (status %s)", run.Status)
	require.Len(t, byKind(e.all())[reconcile.KindPaidButFailed], 1, "the day's paid_but_failed was never reported")
	fa, err := e.att.Get(e.ctx, e.pool, failed.ID)
	require.NoError(t, err)
	require.NotNil(t, fa.DivergedAt)
}

// FINDING (high, R19): truncate(fingerprint, 500) cuts bytes, not
// operations. (a) Two operations whose fingerprints share their first 500
// bytes (a long reference from provider text: Stripe metadata
// saldo_reference takes up to 500 characters) are one row: the second
// unknown_to_us is a seen_count bump of the first, and if an operator
// resolved the first, the second money movement is never reported as
// critical (here: 500.00 BRL moved under the reference the next day, and
// the only open trace is a "high" ledger_totals; audit verify passes).
//
// Fix: when "ref:<ref>|<opKey>" exceeds the column, fingerprint with a hash
// of the whole ("sha256:<hex>"), never a prefix.
func TestLongReferenceKeepsEachOperationItsOwnDivergence_R19(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ref := strings.Repeat("r", 600)
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: ref, ID: "op_first",
		Operation: providers.OpPixTransfer, Amount: "9.99", Currency: "BRL", At: day.Add(13 * time.Hour)}))
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: ref, ID: "op_second",
		Operation: providers.OpPixTransfer, Amount: "500.00", Currency: "BRL", At: day.Add(37 * time.Hour)}))
	e.clock.Set(day.Add(51 * time.Hour))
	e.run()
	first := byKind(e.all())[reconcile.KindUnknownToUs]
	require.Len(t, first, 1)
	_, _, err := reconcile.Resolve(e.ctx, e.pool, first[0].ID, "op_1", "9.99 booked", e.clock.Now())
	require.NoError(t, err)

	next := day.AddDate(0, 0, 1)
	e.clock.Set(next.Add(51 * time.Hour))
	_, err = e.rec.Run(e.ctx, e.prov.Name(), next, reconcile.RunOptions{TriggeredBy: "test"})
	require.NoError(t, err)
	var open []reconcile.Divergence
	for _, d := range byKind(e.all())[reconcile.KindUnknownToUs] {
		if d.Open() {
			open = append(open, d)
		}
	}
	require.Len(t, open, 1, "the second operation (500.00, op_second) was folded into the resolved divergence of op_first")
	require.Equal(t, "op_second", open[0].ProviderID)
}

// FINDING (high, R19), same cause as above, (b): truncate cuts in the
// middle of a multi-byte character; PostgreSQL refuses the invalid UTF-8
// (22021) and the whole run fails, every retry, hiding every later finding
// of the day. A reference of 200 "€" (600 bytes) under no attempt is
// enough: "ref:" + 496 bytes ends inside a rune.
//
// Fix: a hash for long fingerprints (above); truncate on a rune boundary
// for detail and the other truncated texts.
func TestLongMultibyteReferenceDoesNotFailTheRun_R19(t *testing.T) {
	t.Parallel()
	e := setup(t)
	require.NoError(t, e.srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: strings.Repeat("€", 200),
		ID: "op_euro", Operation: providers.OpPixTransfer, Amount: "9.99", Currency: "BRL", At: day.Add(13 * time.Hour)}))
	e.clock.Set(day.Add(51 * time.Hour))
	run, err := e.rec.Run(e.ctx, e.prov.Name(), day, reconcile.RunOptions{TriggeredBy: "test"})
	require.NoError(t, err, "run %s", run.Status)
	require.Len(t, byKind(e.all())[reconcile.KindUnknownToUs], 1)
}

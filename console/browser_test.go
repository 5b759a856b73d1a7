package console_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers/sim"
)

// screenshotDir is where the browser tests write a screenshot of each
// page (ignored by git; docs/console.png is a copy of one).
const screenshotDir = "testdata/screenshots"

// browser starts Debian's chromium, headless, with a fresh profile. The
// tests fail, never skip, without it (.ci/run installs it).
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (apt-get install -y chromium; .ci/run does it): %v", err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox, // as root in CI containers
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1360, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancel)
	// Start the browser on a context without a deadline (it lives as long
	// as this context).
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate("about:blank")))
	return ctx
}

// page is one browser tab on the console.
type page struct {
	t    *testing.T
	ctx  context.Context
	base string
}

func (p *page) do(steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	require.NoError(p.t, chromedp.Do(ctx, steps...))
}

func (p *page) open(path string) {
	p.t.Helper()
	p.do(chromedp.Navigate(p.base+path), chromedp.WaitReady(chromedp.CSS("footer")))
}

func (p *page) text(sel string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	require.NoError(p.t, err, sel)
	return s
}

func (p *page) has(sel string) bool {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	n, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`document.querySelector(%q) !== null`, sel)))
	require.NoError(p.t, err)
	return n
}

func (p *page) location() string {
	p.t.Helper()
	l, err := chromedp.Run(p.ctx, chromedp.Location())
	require.NoError(p.t, err)
	return strings.TrimPrefix(l, p.base)
}

// submit clicks a submit button and waits until the next page has loaded:
// the old document is marked first, so a slow answer is never mistaken for
// the new page.
func (p *page) submit(button string) {
	p.t.Helper()
	p.do(chromedp.Evaluate[chromedp.Void](`window.__saldoOld = true`), chromedp.Click(chromedp.CSS(button)))
	deadline := time.Now().Add(30 * time.Second)
	for {
		done, err := chromedp.Run(p.ctx, chromedp.Evaluate[bool](`window.__saldoOld === undefined && document.readyState === 'complete'`))
		if err == nil && done {
			break
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("no new page after clicking %s (last error: %v)", button, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.do(chromedp.WaitReady(chromedp.CSS("footer")))
}

func (p *page) screenshot(name string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(p.t, err)
	require.NoError(p.t, os.MkdirAll(screenshotDir, 0o755))
	require.NoError(p.t, os.WriteFile(filepath.Join(screenshotDir, name+".png"), png, 0o644))
}

func (p *page) signIn(secret string) {
	p.t.Helper()
	p.open("/console/login")
	p.do(chromedp.SendKeys(chromedp.CSS("#key"), secret))
	p.submit(`#login button[type=submit]`)
	if strings.HasPrefix(p.location(), "/console/login") {
		p.t.Logf("sign-in page after submit: %s", p.text("main"))
	}
}

func (p *page) signOut() {
	p.t.Helper()
	p.submit(`form.who button`)
	require.Equal(p.t, "/console/login", p.location())
}

// The operator's 3 a.m. in a real browser: a payout is stuck after a
// hang-after-commit fault; the operator finds it in the review queue, opens
// its timeline, tries to resolve it failed and is refused (the consistency
// window), then, once a lookup past the window comes back not found,
// resolves it failed with a reason; the auditor then reads every page, sees
// the release in the ledger, has no resolve form and gets 403 posting one;
// a merchant cannot open another merchant's page; a form without its CSRF
// token is refused. Each page is saved as a screenshot.
func TestBrowserOperatorResolvesStuckPayout(t *testing.T) {
	// The provider's consistency window (3m) is longer than the queue's
	// threshold for unknown attempts (1m).
	e := setup(t, envOpts{insecure: true, unknownAfter: time.Minute, sim: sim.Config{ConsistencyWindow: 3 * time.Minute}})
	ctx := browser(t)
	p := &page{t: t, ctx: ctx, base: e.web.URL}

	// Some history: a payout that succeeded, then the stuck one.
	ok, err := e.e.Payouts.CreatePayout(e.ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: "pix_transfer",
		Amount: money.MustParse("5.00", "BRL"), Destination: pixDestination()})
	require.NoError(t, err)
	_, err = e.e.Attempts.Execute(e.ctx, *ok.CurrentAttemptID)
	require.NoError(t, err)
	stuck, a := e.stuckPayout("40.00")
	e.clock.Advance(90 * time.Second) // older than the queue's threshold

	// The operator signs in and lands on the review queue.
	p.open("/console/login")
	p.screenshot("01-login")
	p.signIn(e.secret["operator"])
	require.Equal(t, "/console/review", p.location())
	queue := p.text("#queue")
	require.Contains(t, queue, a.Reference)
	require.Contains(t, queue, "40.00 BRL")
	require.Contains(t, queue, "sim")
	require.Contains(t, queue, "unknown for longer than")
	p.screenshot("02-review-queue")

	// The attempt page: the whole timeline.
	p.do(chromedp.Click(chromedp.CSS(`#queue a[href="/console/attempts/`+a.ID.String()+`"]`)), chromedp.WaitReady(chromedp.CSS("#timeline")))
	timeline := p.text("#timeline")
	require.Contains(t, timeline, "opened")
	require.Contains(t, timeline, "call #1")
	require.Contains(t, timeline, "pending → unknown")
	require.True(t, p.has("#resolve"))

	// failed, inside the consistency window: refused, and the page says why.
	p.do(chromedp.Click(chromedp.CSS(`#resolve input[value=failed]`)),
		chromedp.SendKeys(chromedp.CSS("#reason"), "PSP support (ticket 4711): the transfer never reached the payee bank"))
	p.submit("#resolve-submit")
	msg := p.text("#error")
	require.Contains(t, msg, "Refused:")
	require.Contains(t, msg, "consistency window")
	require.Equal(t, attempts.StatusUnknown, e.attemptStatus(a))
	p.screenshot("03-attempt-refused")

	// The same form without its CSRF token is refused and changes nothing.
	p.do(chromedp.Evaluate[chromedp.Void](`document.querySelector('#resolve input[name=csrf]').remove()`))
	p.submit("#resolve-submit")
	require.Contains(t, p.text("#error"), "CSRF token is missing or wrong")
	require.Contains(t, p.text("h1"), "403")
	require.Equal(t, attempts.StatusUnknown, e.attemptStatus(a))
	p.screenshot("04-csrf-refused")

	// Past the window, a lookup by reference comes back not found: the core
	// allows the operator's "failed" and the reserve is released.
	e.clock.Advance(5 * time.Minute)
	e.prov.lost.Store(true)
	p.open("/console/attempts/" + a.ID.String())
	p.do(chromedp.Click(chromedp.CSS(`#resolve input[value=failed]`)),
		chromedp.SendKeys(chromedp.CSS("#reason"), "PSP support (ticket 4711): the transfer never reached the payee bank"))
	p.submit("#resolve-submit")
	require.Contains(t, p.text(".flash"), "now failed")
	require.Equal(t, "failed", p.text("#attempt-status"))
	timeline = p.text("#timeline")
	require.Contains(t, timeline, e.keyID["operator"], "the operator is recorded")
	require.Contains(t, timeline, "unknown → failed")
	require.Contains(t, timeline, "ticket 4711")
	require.False(t, p.has("#resolve"), "a final attempt has no form")
	require.Equal(t, attempts.StatusFailed, e.attemptStatus(a))
	p.screenshot("05-attempt-resolved")
	p.signOut()

	// The auditor reads every page; the ledger shows the release.
	p.signIn(e.secret["auditor"])
	require.Equal(t, "/console/", p.location())
	p.screenshot("06-overview")
	p.open("/console/attempts/" + a.ID.String())
	require.False(t, p.has("#resolve"), "no resolve form for an auditor")
	require.Contains(t, p.text(".txs"), "payout_release")
	p.open("/console/merchants/m1/payouts/" + stuck.ID)
	require.Equal(t, "failed", p.text("#payout-status"))
	txs := p.text(".txs")
	require.Contains(t, txs, "payout_reserve")
	require.Contains(t, txs, "payout_release")
	p.screenshot("07-payout")
	release := e.releaseOf(a)
	p.do(chromedp.Click(chromedp.CSS(fmt.Sprintf(`a[href="/console/ledger/transactions/%d"]`, release.ID))),
		chromedp.WaitReady(chromedp.CSS("#postings")))
	require.Equal(t, "payout_release", p.text("#cause"))
	postings := p.text("#postings")
	require.Contains(t, postings, "merchant/m1/reserved/BRL")
	require.Contains(t, postings, "merchant/m1/available/BRL")
	require.Contains(t, postings, "40.00")
	p.screenshot("08-transaction")
	// ...and back to the payout it came from.
	p.do(chromedp.Click(chromedp.CSS("#cause-link")), chromedp.WaitReady(chromedp.CSS("#payout-status")))
	require.Equal(t, "/console/merchants/m1/payouts/"+stuck.ID, p.location())

	p.open("/console/ledger/account?code=merchant%2Fm1%2Favailable%2FBRL")
	require.Equal(t, "95.00 BRL", p.text("#balance"), "100 - 5 paid; the 40 came back")
	require.Contains(t, p.text("#postings"), "40.00")
	p.do(chromedp.SendKeys(chromedp.CSS("#at"), e.clock.Now().Add(-time.Hour).Format(time.RFC3339)))
	p.submit("#balance-at button")
	require.Contains(t, p.text("#balance-at-result"), "0.00 BRL", "before the funding")
	p.screenshot("09-account")
	p.open("/console/ledger")
	require.Contains(t, p.text("#accounts"), "merchant/m1/available/BRL")
	p.screenshot("10-accounts")
	p.open("/console/review")
	p.screenshot("11-review-auditor")
	p.open("/console/audit")
	p.submit("#run-audit button")
	require.Contains(t, p.text("#last-audit"), "Last result: OK")
	p.screenshot("12-audit")
	p.open("/console/merchants/m1")
	require.Contains(t, p.text("#balances"), "95.00")
	p.screenshot("13-merchant-as-auditor")
	p.open("/console/charts")
	require.Contains(t, p.text("main"), "Provider latency percentiles")
	p.screenshot("14-charts")
	p.open("/console/reconcile")
	p.screenshot("14-reconcile")

	// An auditor posting a resolution (a form made by hand, with the
	// session's valid CSRF token) gets 403.
	p.open("/console/attempts/" + a.ID.String())
	p.do(chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => {
		const f = document.createElement('form');
		f.method = 'post'; f.action = '/console/attempts/%s/resolve'; f.id = 'forged';
		for (const [k, v] of [['csrf', document.querySelector('form.who input[name=csrf]').value], ['status', 'succeeded'], ['reason', 'auditor tries']]) {
			const i = document.createElement('input'); i.type = 'hidden'; i.name = k; i.value = v; f.appendChild(i);
		}
		const b = document.createElement('button'); b.type = 'submit'; b.id = 'forged-submit'; f.appendChild(b);
		document.body.appendChild(f);
	})()`, a.ID)))
	p.submit("#forged-submit")
	require.Contains(t, p.text("h1"), "403")
	require.Contains(t, p.text("#error"), "may not do this")
	p.screenshot("15-auditor-post-403")
	p.signOut()

	// A merchant sees its own merchant only.
	p.signIn(e.secret["m2"])
	require.Equal(t, "/console/merchants/m2", p.location())
	p.open("/console/merchants/m1")
	require.Contains(t, p.text("h1"), "404")
	notYours := p.text("#error")
	p.open("/console/merchants/m1/payouts/" + stuck.ID)
	require.Contains(t, p.text("h1"), "404")
	p.open("/console/merchants/nosuch")
	require.Equal(t, notYours, p.text("#error"), "one answer for no such and not yours")
	p.open("/console/review")
	require.Contains(t, p.text("h1"), "403")
	p.signOut()
	p.signIn(e.secret["m1"])
	require.Equal(t, "/console/merchants/m1", p.location())
	require.Contains(t, p.text("#balances"), "95.00")
	require.Contains(t, p.text("#payouts"), stuck.ID)
	p.screenshot("16-merchant")
}

func (e *env) attemptStatus(a attempts.Attempt) attempts.Status {
	e.t.Helper()
	got, err := e.e.Attempts.Get(e.ctx, e.pool, a.ID)
	require.NoError(e.t, err)
	return got.Status
}

func (e *env) releaseOf(a attempts.Attempt) ledger.Transaction {
	e.t.Helper()
	pg, err := ledger.ListTransactions(e.ctx, e.pool, ledger.TransactionFilter{CauseKind: payouts.CauseRelease, CauseID: a.ID.String()},
		ledger.PageRequest{})
	require.NoError(e.t, err)
	require.Len(e.t, pg.Transactions, 1)
	return pg.Transactions[0]
}

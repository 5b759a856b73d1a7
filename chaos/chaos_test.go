package chaos

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/internal/pgproxy"
	"github.com/saldo/saldo/providers/sim"
)

var long = flag.Bool("chaos.long", false, "run the long chaos run (minutes); also SALDO_CHAOS_LONG=1")

// profile is the size of one run.
type profile struct {
	name        string
	load        time.Duration // how long clients send
	clients     int
	merchants   int
	killEvery   [2]time.Duration // a SIGKILL every [min, max)
	pgRestartAt time.Duration    // into the load
	converge    time.Duration    // deadline for every operation to be final or in review
	budget      time.Duration    // how long a client retries one request
	pixExpiry   int              // seconds
	commitLoss  float64          // pgproxy: probability a transaction's commit answer is lost
	dbCutEvery  time.Duration    // pgproxy: a random connection cut this often
	pspCutEvery time.Duration    // PSP proxy: a random connection cut this often
	simFaults   string           // saldo sim-provider --random-faults
	// calmAfterLoad turns the sim's random faults off once the load ends.
	calmAfterLoad bool
}

func shortProfile() profile {
	return profile{name: "short", load: 25 * time.Second, clients: 4, merchants: 3,
		killEvery: [2]time.Duration{4 * time.Second, 7 * time.Second}, pgRestartAt: 12 * time.Second,
		converge: 5 * time.Minute, budget: 20 * time.Second, pixExpiry: 60,
		commitLoss: 0.004, dbCutEvery: 3 * time.Second, pspCutEvery: 2 * time.Second,
		simFaults: "hang_after=0.03,error_after=0.03,unavailable=0.03,rate_limit=0.03,slow=0.04,reset_before=0.02,lookup_fail=0.05",
		// Once the attack is over the PSP is calmed: three failing lookups
		// in a row (lookup_fail, unavailable and rate_limit all hit lookups)
		// would push an attempt's resolution to 8.5 min (the resolve
		// schedule: 30 s, 1 min, 2 min, 5 min), past the short deadline.
		calmAfterLoad: true}
}

func longProfile() profile {
	return profile{name: "long", load: 5 * time.Minute, clients: 8, merchants: 5,
		killEvery: [2]time.Duration{3 * time.Second, 8 * time.Second}, pgRestartAt: 2 * time.Minute,
		converge: 15 * time.Minute, budget: 75 * time.Second, pixExpiry: 60,
		commitLoss: 0.004, dbCutEvery: 2 * time.Second, pspCutEvery: 1500 * time.Millisecond,
		simFaults: "hang_after=0.03,error_after=0.03,unavailable=0.03,rate_limit=0.03,slow=0.04,reset_before=0.02,lookup_fail=0.05"}
}

func isLong() bool { return *long || os.Getenv("SALDO_CHAOS_LONG") == "1" }

// TestChaos runs the chaos run twice at once: against a PSP that honours
// idempotency keys, and against one that ignores them (R20).
func TestChaos(t *testing.T) {
	p := shortProfile()
	if isLong() {
		p = longProfile()
	}
	bin, err := buildSaldo()
	if err != nil {
		t.Fatal(err)
	}
	outDir := os.Getenv("SALDO_CHAOS_OUT")
	if outDir == "" {
		outDir = filepath.Join(os.TempDir(), "saldo-chaos")
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	tables := map[string]*runResult{}
	for i, mode := range []string{"idempotent", "no-idempotency"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			r := runChaos(t, bin, p, mode == "no-idempotency", uint64(17+i), outDir)
			mu.Lock()
			tables[mode] = r
			mu.Unlock()
		})
	}
	t.Cleanup(func() {
		if len(tables) == 0 {
			return
		}
		table := renderTables(p, tables)
		t.Log("\n" + table)
		path := filepath.Join(outDir, "table-"+p.name+".md")
		if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
			t.Errorf("write %s: %v", path, err)
		} else {
			t.Logf("table written to %s", path)
		}
	})
}

// runResult is what one sub-run counted and proved.
type runResult struct {
	rows       [][2]string // label, value (in order)
	violations []string
}

func (r *runResult) row(label string, format string, args ...any) {
	r.rows = append(r.rows, [2]string{label, fmt.Sprintf(format, args...)})
}

// env is one sub-run's world.
type env struct {
	t       *testing.T
	bin     string
	pg      *cluster
	dbProxy *pgproxy.Proxy
	psp     *tcpCutter
	sim     *child
	simURL  string
	procs   []*child
	relay   *webhookRelay
	direct  *pgxpool.Pool

	kills, restarts, restartFailures, unexpectedExits, pgRestarts atomic.Int64
	dbCuts, pspCuts                                               atomic.Int64
	noRestart                                                     atomic.Int64 // a process that did not come back after 6 tries
	events                                                        []string
	evMu                                                          sync.Mutex
}

func (e *env) event(format string, args ...any) {
	e.evMu.Lock()
	e.events = append(e.events, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
	e.evMu.Unlock()
}

func runChaos(t *testing.T, bin string, p profile, noIdem bool, seed uint64, outDir string) *runResult {
	ctx := context.Background()
	mode := "idempotent"
	if noIdem {
		mode = "no-idempotency"
	}
	logDir := filepath.Join(outDir, p.name+"-"+mode)
	_ = os.RemoveAll(logDir)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: logs in %s", mode, logDir)
	e := &env{t: t, bin: bin}
	e.pg = startCluster(t)
	dbURL := e.pg.URL("saldo")
	var err error
	e.direct, err = pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	// pgcluster runs with synchronous_commit=off (throwaway databases): a
	// crash then loses the last commits, acknowledged ones included, which
	// no application can survive. The chaos run crashes PostgreSQL, so its
	// database commits durably (fsync=off is harmless: the OS survives).
	if _, err := e.direct.Exec(ctx, `ALTER DATABASE saldo SET synchronous_commit = on`); err != nil {
		t.Fatal(err)
	}
	e.direct.Reset()
	t.Cleanup(e.direct.Close)

	// Migrate with the binary, as an operator would.
	mig := &child{name: "migrate"}
	_ = mig
	if out, err := runOnce(bin, []string{"SALDO_DATABASE_URL=" + dbURL}, "migrate"); err != nil {
		t.Fatalf("saldo migrate: %v\n%s", err, out)
	}

	// The PSP: a sim-provider process with its fault profile.
	secret := "whsec_chaos"
	simPort := freePort(t)
	apiPorts := []int{freePort(t), freePort(t), freePort(t)}
	var bases []string
	for _, port := range apiPorts[:2] {
		bases = append(bases, fmt.Sprintf("http://127.0.0.1:%d", port))
	}
	e.relay = startRelay(t, bases, 0.1, seed)
	simArgs := []string{"sim-provider", "--listen", fmt.Sprintf("127.0.0.1:%d", simPort), "--seed", fmt.Sprint(seed),
		"--random-faults", p.simFaults,
		"--lookup-lag", "1s", "--settle-after", "1s", "--key-lifetime", "20s",
		"--webhook-url", e.relay.url(), "--webhook-secret", secret,
		"--webhook-duplicates", "0.2", "--webhook-reorder", "0.2"}
	if noIdem {
		simArgs = append(simArgs, "--no-idempotency")
	}
	e.sim = &child{name: "sim", args: simArgs, logPath: filepath.Join(logDir, "sim.log"), ready: "sim-provider listening"}
	if err := e.sim.start(bin, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.sim.stop)
	e.simURL = fmt.Sprintf("http://127.0.0.1:%d", simPort)
	e.psp = startTCPCutter(t, fmt.Sprintf("127.0.0.1:%d", simPort))
	e.dbProxy = pgproxy.Start(t, dbURL)

	// Three saldo serve processes, through both proxies.
	for i, port := range apiPorts {
		roles := "api,workers"
		if i == 2 {
			roles = "workers"
		}
		c := &child{name: fmt.Sprintf("saldo-%d", i+1), logPath: filepath.Join(logDir, fmt.Sprintf("saldo-%d.log", i+1)),
			ready: `"msg":"api listening"`,
			args: []string{"serve", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--sim-url", "http://" + e.psp.addr(),
				"--roles", roles, "--provider-connect-timeout", "1s", "--provider-read-timeout", "2s",
				"--stale-call-after", "9s", "--max-workers", "8", "--log-level", "info"},
			env: []string{"SALDO_DATABASE_URL=" + e.dbProxy.URL(dbURL), "SALDO_SIM_WEBHOOK_SECRET=" + secret}}
		if err := e.startProc(c); err != nil {
			t.Fatal(err)
		}
		e.procs = append(e.procs, c)
	}
	t.Cleanup(func() {
		for _, c := range e.procs {
			c.stop()
		}
	})

	// Merchants, keys and their first funds, through the API.
	st := &stats{}
	cl := &apiClient{bases: bases, http: &http.Client{Timeout: 15 * time.Second}, st: st, budget: 60 * time.Second}
	_, admin, err := api.CreateKey(ctx, e.direct, api.RoleAdmin, "", "chaos-admin", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	ld := &loader{api: cl, admin: admin, simURL: e.simURL, pixExpiry: p.pixExpiry, st: st}
	for i := range p.merchants {
		id := fmt.Sprintf("m%d", i+1)
		if a := cl.do(ctx, rng, http.MethodPost, "/v1/merchants", admin, "merchant-"+id,
			jsonBody(map[string]any{"id": id, "name": "Loja " + id})); a.status != http.StatusCreated {
			t.Fatalf("create merchant %s: %d %s", id, a.status, a.body)
		}
		a := cl.do(ctx, rng, http.MethodPost, "/v1/keys", admin, "key-"+id,
			jsonBody(map[string]any{"role": "merchant", "merchant_id": id, "name": "chaos " + id}))
		if a.status != http.StatusCreated {
			t.Fatalf("create key %s: %d %s", id, a.status, a.body)
		}
		var k struct {
			Secret string `json:"secret"`
		}
		if err := jsonUnmarshal(a.body, &k); err != nil || k.Secret == "" {
			t.Fatalf("key %s: %v %s", id, err, a.body)
		}
		m := &merchant{id: id, key: k.Secret}
		ld.merchants = append(ld.merchants, m)
		r := &request{Merchant: id, Kind: "funding", Key: "fund-" + id, Amount: "3000.00",
			Path: "/v1/merchants/" + id + "/fundings"}
		r.Body = jsonBody(map[string]any{"amount": r.Amount, "currency": "BRL", "reason": "chaos seed"})
		a = cl.do(ctx, rng, http.MethodPost, r.Path, admin, r.Key, r.Body)
		if a.status != http.StatusCreated {
			t.Fatalf("fund %s: %d %s", id, a.status, a.body)
		}
		r.Status, r.ID = a.status, idOf(a.body)
		st.add(r)
	}
	cl.budget = p.budget

	// Chaos: killer, PostgreSQL restart, network cuts; and the load.
	start := time.Now()
	loadCtx, stopLoad := context.WithTimeout(ctx, p.load)
	defer stopLoad()
	var bg sync.WaitGroup
	e.dbProxy.SetRandom(pgproxy.Random{CommitAnswerLoss: p.commitLoss, Seed: seed})
	var killMu sync.Mutex // the killer and the PostgreSQL restart never overlap
	bg.Add(4)
	go func() { defer bg.Done(); e.killer(loadCtx, p, rng.Uint64(), &killMu) }()
	go func() {
		defer bg.Done()
		select {
		case <-loadCtx.Done():
			return
		case <-time.After(p.pgRestartAt):
		}
		killMu.Lock()
		defer killMu.Unlock()
		e.event("PostgreSQL: pg_ctl restart -m immediate")
		if err := e.pg.restartImmediate(); err != nil {
			st.violate("PostgreSQL restart failed: %v", err)
			return
		}
		e.pgRestarts.Add(1)
		e.event("PostgreSQL back")
	}()
	go func() {
		defer bg.Done()
		r := rand.New(rand.NewPCG(seed, 2))
		tick := time.NewTicker(p.dbCutEvery)
		defer tick.Stop()
		for {
			select {
			case <-loadCtx.Done():
				return
			case <-tick.C:
				if e.dbProxy.CutConnection(r.IntN) {
					e.dbCuts.Add(1)
				}
			}
		}
	}()
	go func() {
		defer bg.Done()
		r := rand.New(rand.NewPCG(seed, 3))
		tick := time.NewTicker(p.pspCutEvery)
		defer tick.Stop()
		for {
			select {
			case <-loadCtx.Done():
				return
			case <-tick.C:
				if e.psp.cutOne(r) {
					e.pspCuts.Add(1)
				}
			}
		}
	}()
	ld.run(loadCtx, p.clients, seed)
	bg.Wait()
	loadDur := time.Since(start)
	e.dbProxy.SetRandom(pgproxy.Random{})
	if p.calmAfterLoad {
		if err := sim.NewProvider(e.simURL).SetRandomFaults(ctx, ""); err != nil {
			st.violate("calm the sim: %v", err)
		}
		e.event("sim calmed: no random faults")
	}
	// Every process up again (the killer may have left none killed, but a
	// process may have died on its own).
	for _, c := range e.procs {
		if !c.alive() {
			if err := e.startProc(c); err != nil {
				st.violate("%s does not restart after the chaos: %v\n%s", c.name, err, c.tail(30))
			}
		}
	}
	ld.payers.Wait()

	// The run ends when every operation is final or in review.
	convStart := time.Now()
	var open int
	lastLog := time.Now()
	for {
		open, err = openOperations(ctx, e.direct)
		if err == nil && open == 0 {
			break
		}
		if time.Since(lastLog) > 15*time.Second {
			lastLog = time.Now()
			e.event("converging: %d operations open", open)
			for _, l := range describeOpen(ctx, e.direct) {
				e.event("  open: %s", l)
			}
		}
		if time.Since(convStart) > p.converge {
			break
		}
		time.Sleep(time.Second)
	}
	convDur := time.Since(convStart)
	for _, c := range e.procs {
		if !c.alive() {
			st.violate("%s died after the chaos (unexpected exit)\n%s", c.name, c.tail(30))
		}
	}

	res := &runResult{}
	if n := e.noRestart.Load(); n > 0 {
		res.violations = append(res.violations, fmt.Sprintf("%d times a killed saldo process did not come back after 6 tries (see events.log)", n))
	}
	res.row("PSP", "%s", map[bool]string{false: "idempotency keys (24 h cut to 20 s)", true: "no idempotency keys (R20)"}[noIdem])
	res.row("sim-provider --random-faults", "%s%s", p.simFaults, map[bool]string{true: " (off once the load ends)"}[p.calmAfterLoad])
	res.row("load / convergence", "%s / %s", loadDur.Round(time.Second), convDur.Round(time.Second))
	if open > 0 {
		res.violations = append(res.violations, fmt.Sprintf("%d operations neither final nor in review after %s", open, p.converge))
		for _, l := range describeOpen(ctx, e.direct) {
			res.violations = append(res.violations, "  open: "+l)
		}
	}
	e.verify(ctx, res, st, ld)
	res.row("processes SIGKILLed / restarted / restart failures / unexpected exits", "%d / %d / %d / %d",
		e.kills.Load(), e.restarts.Load(), e.restartFailures.Load(), e.unexpectedExits.Load())
	res.row("PostgreSQL restarts (immediate)", "%d", e.pgRestarts.Load())
	res.row("DB proxy: commit answers lost / connections cut", "%d / %d", e.dbProxy.RandomCuts(), e.dbCuts.Load())
	res.row("PSP proxy: connections cut", "%d", e.pspCuts.Load())
	res.row("webhooks: forwarded / lost on purpose / refused or failed", "%d / %d / %d",
		e.relay.forwarded.Load(), e.relay.lost.Load(), e.relay.failed.Load())
	res.row("sim faults injected", "%s", simFaults(e.sim.logPath))
	res.row("violations", "%d", len(res.violations))
	e.evMu.Lock()
	_ = os.WriteFile(filepath.Join(logDir, "events.log"), []byte(strings.Join(e.events, "\n")+"\n"), 0o644)
	e.evMu.Unlock()
	tbl := renderTables(p, map[string]*runResult{mode: res})
	_ = os.WriteFile(filepath.Join(logDir, "table.md"), []byte(tbl), 0o644)
	t.Log("\n" + tbl)
	for _, v := range res.violations {
		t.Error(v)
	}
	if len(res.violations) > 0 {
		t.Logf("logs and events in %s", logDir)
	}
	return res
}

// startProc starts (or restarts) a saldo process, retrying a few times: the
// PSP proxy or a PostgreSQL restart can make one start fail, and serve
// refuses to start when it cannot read the provider's capabilities.
func (e *env) startProc(c *child) error {
	var err error
	for try := range 6 {
		if err = c.start(e.bin, 60*time.Second); err == nil {
			return nil
		}
		e.restartFailures.Add(1)
		e.event("%s start %d failed: %v", c.name, try+1, err)
		time.Sleep(time.Second)
	}
	return err
}

// killer SIGKILLs a random saldo process every few seconds and restarts it.
func (e *env) killer(ctx context.Context, p profile, seed uint64, mu *sync.Mutex) {
	rng := rand.New(rand.NewPCG(seed, 4))
	for {
		wait := p.killEvery[0] + time.Duration(rng.Int64N(int64(p.killEvery[1]-p.killEvery[0])))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		mu.Lock()
		// A process that died on its own is an unexpected exit: restart it.
		for _, c := range e.procs {
			if !c.alive() && !c.killed.Load() {
				e.unexpectedExits.Add(1)
				e.event("%s exited on its own", c.name)
			}
			if !c.alive() {
				if err := e.startProc(c); err == nil {
					e.restarts.Add(1)
				}
			}
		}
		c := e.procs[rng.IntN(len(e.procs))]
		e.event("SIGKILL %s", c.name)
		c.kill()
		e.kills.Add(1)
		time.Sleep(time.Duration(200+rng.IntN(800)) * time.Millisecond)
		if err := e.startProc(c); err != nil {
			e.event("%s does not restart: %v", c.name, err)
			e.noRestart.Add(1)
		} else {
			e.restarts.Add(1)
		}
		mu.Unlock()
	}
}

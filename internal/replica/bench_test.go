package replica_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/internal/engine"
	"github.com/saldo/saldo/internal/replica"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// BenchmarkReplicaReads measures, in one run on one machine, a real
// streaming replica (pgcluster) against its primary: the read latency of a
// merchant's balances and of a page of an account's entries over the API,
// through an API that reads the replica and one that reads the primary,
// requests alternating between the two; first with the database idle, then
// while writers post funding adjustments as fast as they can. It reports the
// replica's lag (the Saldo-Replica-Lag of its answers) under that load, the
// share of routed reads the replica answered, and the ratio of the replica's
// latency to the primary's. SALDO_REPLICA_BENCH_PHASE (default 10s) sets
// each phase's length, SALDO_REPLICA_BENCH_WRITERS (default 8) the writers.
//
//	go test -run '^$' -bench BenchmarkReplicaReads -benchtime 1x ./internal/replica/
func BenchmarkReplicaReads(b *testing.B) {
	ctx := context.Background()
	phase := 10 * time.Second
	if v := os.Getenv("SALDO_REPLICA_BENCH_PHASE"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(b, err)
		phase = d
	}
	writers := 8
	if v := os.Getenv("SALDO_REPLICA_BENCH_WRITERS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(b, err)
		writers = n
	}
	// synchronous_commit as in production (the test clusters' default is
	// off): a commit's WAL is flushed, and so streamed, before it is
	// acknowledged.
	rc := startReplicated(b, []string{"synchronous_commit=on"}, true)
	pool, rpool := rc.pool, rc.rpool

	psp := sim.NewServer(sim.Config{Seed: 1}).Start()
	b.Cleanup(psp.Close)
	prov := psp.NewProvider()
	e, err := engine.New(engine.Config{Pool: pool, Providers: []providers.Provider{prov}, PayoutProvider: prov.Name(),
		Attempts: attempts.Config{}})
	require.NoError(b, err)
	reads, err := replica.New(replica.Config{Primary: pool, Replica: rpool, MaxLag: time.Minute})
	require.NoError(b, err)
	b.Cleanup(reads.Close)
	server := func(rd *replica.Reads) string {
		srv, err := api.New(api.Config{Pool: pool, Payouts: e.Payouts, Attempts: e.Attempts, Reads: rd})
		require.NoError(b, err)
		hs := httptest.NewServer(srv)
		b.Cleanup(hs.Close)
		return hs.URL
	}
	onReplica, onPrimary := server(reads), server(nil)
	_, key, err := api.CreateKey(ctx, pool, api.RoleAdmin, "", "bench", time.Now())
	require.NoError(b, err)

	const nMerchants = 20
	for i := range nMerchants {
		id := fmt.Sprintf("m%d", i)
		_, err := merchants.Create(ctx, pool, id, "Loja")
		require.NoError(b, err)
		for j := range 200 { // a history to page through
			_, err = merchants.Fund(ctx, pool, merchants.Funding{MerchantID: id, Amount: money.MustParse("1.00", "BRL"),
				Key: fmt.Sprintf("seed-%d", j), Reason: "seed", Actor: "bench"})
			require.NoError(b, err)
		}
	}
	require.Eventually(b, func() bool { lag, ok := reads.Lag(); return ok && lag < time.Second }, time.Minute, 50*time.Millisecond)

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	get := func(base, path string) (time.Duration, string) {
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		require.NoError(b, err)
		req.Header.Set("Authorization", "Bearer "+key)
		start := time.Now()
		res, err := client.Do(req)
		require.NoError(b, err)
		_, err = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		d := time.Since(start)
		require.NoError(b, err)
		require.Equal(b, http.StatusOK, res.StatusCode, path)
		return d, res.Header.Get(replica.LagHeader)
	}

	type result struct {
		lat   map[string][]time.Duration // "replica balances", "primary postings", ...
		lags  []float64
		total int
		fromR int
	}
	measure := func(load bool) (result, float64) {
		res := result{lat: map[string][]time.Duration{}}
		stop := make(chan struct{})
		var wrote atomic.Int64
		var wg sync.WaitGroup
		if load {
			for w := range writers {
				wg.Go(func() {
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						_, err := merchants.Fund(ctx, pool, merchants.Funding{MerchantID: fmt.Sprintf("m%d", (w+i)%nMerchants),
							Amount: money.MustParse("0.01", "BRL"), Key: fmt.Sprintf("load-%d-%d-%d", w, i, time.Now().UnixNano()),
							Reason: "load", Actor: "bench"})
						if err != nil {
							b.Error(err)
							return
						}
						wrote.Add(1)
					}
				})
			}
		}
		start := time.Now()
		for i := 0; time.Since(start) < phase; i++ {
			m := fmt.Sprintf("m%d", i%nMerchants)
			for _, q := range []struct{ name, path string }{
				{"balances", "/v1/merchants/" + m + "/balances"},
				{"postings", "/v1/ledger/postings?order=desc&limit=50&account=merchant/" + m + "/available/BRL"},
			} {
				// Alternate which goes first, so neither always meets the
				// other's warmed caches.
				order := []string{"replica", "primary"}
				if i%2 == 1 {
					order = []string{"primary", "replica"}
				}
				for _, where := range order {
					base := onPrimary
					if where == "replica" {
						base = onReplica
					}
					d, lag := get(base, q.path)
					res.lat[where+" "+q.name] = append(res.lat[where+" "+q.name], d)
					if where == "replica" {
						res.total++
						if lag != "" {
							res.fromR++
							f, err := strconv.ParseFloat(lag, 64)
							require.NoError(b, err)
							res.lags = append(res.lags, f)
						}
					}
				}
			}
		}
		elapsed := time.Since(start)
		close(stop)
		wg.Wait()
		return res, float64(wrote.Load()) / elapsed.Seconds()
	}
	pct := func(xs []time.Duration, p float64) time.Duration {
		s := slices.Clone(xs)
		slices.Sort(s)
		return s[min(len(s)-1, int(p*float64(len(s))))]
	}
	pctF := func(xs []float64, p float64) float64 {
		if len(xs) == 0 {
			return -1
		}
		s := slices.Clone(xs)
		slices.Sort(s)
		return s[min(len(s)-1, int(p*float64(len(s))))]
	}
	b.ResetTimer()
	for range b.N {
		for _, load := range []bool{false, true} {
			res, wps := measure(load)
			name := "idle"
			if load {
				name = fmt.Sprintf("%d writers", writers)
			}
			fmt.Printf("== %s: %.0f writes/s, %d of %d routed reads answered by the replica, fallbacks %v\n",
				name, wps, res.fromR, res.total, reads.Stats().Fallbacks)
			fmt.Printf("   Saldo-Replica-Lag: p50 %.3fs p99 %.3fs max %.3fs\n", pctF(res.lags, 0.5), pctF(res.lags, 0.99), pctF(res.lags, 1))
			for _, q := range []string{"balances", "postings"} {
				rp, pp := res.lat["replica "+q], res.lat["primary "+q]
				fmt.Printf("   %-8s replica p50 %v p99 %v | primary p50 %v p99 %v | replica/primary p50 %.2fx p99 %.2fx (%d each)\n",
					q, pct(rp, 0.5).Round(time.Microsecond), pct(rp, 0.99).Round(time.Microsecond),
					pct(pp, 0.5).Round(time.Microsecond), pct(pp, 0.99).Round(time.Microsecond),
					float64(pct(rp, 0.5))/float64(pct(pp, 0.5)), float64(pct(rp, 0.99))/float64(pct(pp, 0.99)), len(rp))
			}
			if load {
				b.ReportMetric(wps, "writes/s")
				b.ReportMetric(pctF(res.lags, 0.99), "lag_p99_s")
				b.ReportMetric(float64(pct(res.lat["replica postings"], 0.99))/float64(pct(res.lat["primary postings"], 0.99)), "postings_p99_replica/primary")
			}
		}
	}
	b.StopTimer()
	ar, err := audit.Run(ctx, pool)
	require.NoError(b, err)
	require.True(b, ar.OK(), ar.Summary())
	fmt.Println("audit: clean")
}

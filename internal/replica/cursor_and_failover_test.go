package replica_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/internal/engine"
	"github.com/saldo/saldo/internal/pgcluster"
	"github.com/saldo/saldo/internal/replica"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/migrations"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// A statement cursor issued by a page the primary answered (a fallback:
// lagging, unavailable, failed) keeps working when the next page is routed to a replica that
// is within --read-max-lag but behind the primary. docs/scale-out.md: "A
// cursor taken on a replica stays valid on the primary and the other way
// round, so consecutive pages of one listing may come from different
// servers"; "a page read on a lagging replica simply ends earlier"; and the
// package: "a replica never causes an error". Two API servers on the same
// primary and real streaming replica, as in TestReplicaReads_R23_R24: a
// tight --read-max-lag (the paused replica is left: the primary answers)
// and a loose one (the paused replica answers).
func TestStatementCursorFromPrimaryOnALaggingReplica(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rc := startReplicated(t, nil, true)
	pool, rpool := rc.pool, rc.rpool

	psp := sim.NewServer(sim.Config{Seed: 5}).Start()
	t.Cleanup(psp.Close)
	prov := psp.NewProvider()
	e, err := engine.New(engine.Config{Pool: pool, Providers: []providers.Provider{prov}, PayoutProvider: prov.Name(),
		Attempts: attempts.Config{}})
	require.NoError(t, err)
	serve := func(maxLag time.Duration) (string, *replica.Reads) {
		reads, err := replica.New(replica.Config{Primary: pool, Replica: rpool, MaxLag: maxLag, Interval: 20 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(reads.Close)
		srv, err := api.New(api.Config{Pool: pool, Payouts: e.Payouts, Attempts: e.Attempts, Reads: reads})
		require.NoError(t, err)
		hs := httptest.NewServer(srv)
		t.Cleanup(hs.Close)
		return hs.URL, reads
	}
	loose, _ := serve(time.Minute)
	tight, _ := serve(300 * time.Millisecond)

	_, key, err := api.CreateKey(ctx, pool, api.RoleAdmin, "", "admin", time.Now())
	require.NoError(t, err)
	_, err = merchants.Create(ctx, pool, "m1", "Loja")
	require.NoError(t, err)
	n := 0
	fund := func(amount, cur string) {
		n++
		_, err := merchants.Fund(ctx, pool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse(amount, cur),
			Key: "f" + string(rune('a'+n)), Reason: "seed", Actor: "test"})
		require.NoError(t, err)
	}
	// Two accounts: available BRL and available USD, two entries each.
	fund("1.00", "BRL")
	fund("2.00", "USD")
	fund("3.00", "BRL")
	fund("4.00", "USD")

	// The replica has all four.
	require.Eventually(t, func() bool {
		var c int
		require.NoError(t, rpool.QueryRow(ctx, `SELECT count(*) FROM ledger_postings p JOIN ledger_accounts a ON a.id = p.account_id
			WHERE a.owner_id = 'm1'`).Scan(&c))
		return c == 4
	}, 30*time.Second, 20*time.Millisecond)

	// Pause the replica's replay: it stays within the loose bound but
	// falls behind the primary.
	rconn, err := pgx.Connect(ctx, rc.replica.URL("postgres"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = rconn.Close(context.Background()) })
	_, err = rconn.Exec(ctx, `SELECT pg_wal_replay_pause()`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var state string
		require.NoError(t, rconn.QueryRow(ctx, `SELECT pg_get_wal_replay_pause_state()`).Scan(&state))
		return state == "paused"
	}, 10*time.Second, 10*time.Millisecond)
	// Written on the primary only: BRL seq 3 and 4, then USD seq 3.
	fund("5.00", "BRL")
	fund("6.00", "BRL")
	fund("7.00", "USD")
	time.Sleep(400 * time.Millisecond) // the tight server now leaves the replica

	get := func(base, path string) answer { return call(t, base, "GET", path, key, "", nil) }
	page := func(base, order, cursor string, limit int) answer {
		q := url.Values{"order": {order}, "limit": {strconv.Itoa(limit)}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		return get(base, "/v1/merchants/m1/statement?"+q.Encode())
	}

	for _, tc := range []struct {
		order string
		limit int
	}{
		// Oldest first: page 1 takes BRL 1..4 (and USD 1, 2); BRL's position
		// is 4, past the replica's last BRL seq (2) + 1.
		{"asc", 6},
		// Newest first: page 1 takes USD 3; BRL is not reached and starts
		// at its end on the primary (last_seq 4 + 1), past the replica's.
		{"desc", 1},
	} {
		t.Run(tc.order, func(t *testing.T) {
			first := page(tight, tc.order, "", tc.limit)
			require.Equal(t, http.StatusOK, first.status, string(first.body))
			require.Empty(t, first.header.Get(replica.LagHeader), "page 1 must come from the primary")
			next, _ := first.json(t)["next_cursor"].(string)
			require.NotEmpty(t, next, string(first.body))

			second := page(loose, tc.order, next, tc.limit)
			_, fromReplica := second.lag(t)
			t.Logf("page 2: status %d, from replica %v: %s", second.status, fromReplica, second.body)
			require.Equal(t, http.StatusOK, second.status,
				"the primary's cursor is refused because the page was routed to a replica that is behind: %s", second.body)
		})
	}
	_, err = rconn.Exec(ctx, `SELECT pg_wal_replay_resume()`)
	require.NoError(t, err)
}

// After a failover (replica r1 promoted, --database-url now names it), a
// second replica r2 that followed the old primary p1 is still "in
// recovery", and p1 had acknowledged writes r1 never received (asynchronous
// replication: lost in the failover) but r2 replayed: r2's replay position
// is ahead of the new primary's insert position, as if both were one
// history. r2 is on the old timeline, so it does not follow the primary and
// is never read (as a promoted replica is not), rather than serving a
// balance the primary does not have with a near-zero Saldo-Replica-Lag.
func TestStandbyOfTheOldPrimaryIsNotReadAfterAFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p1, err := pgcluster.Start(ctx, pgcluster.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p1.Remove()) })
	_, err = migrations.Up(ctx, p1.URL("postgres"), nil)
	require.NoError(t, err)
	r1, err := p1.StartReplica(ctx, pgcluster.ReplicaOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r1.Remove()) })
	r2, err := p1.StartReplica(ctx, pgcluster.ReplicaOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r2.Remove()) })

	connect := func(c *pgcluster.Cluster) *pgx.Conn {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		return conn
	}
	c1, cr1, cr2 := connect(p1), connect(r1), connect(r2)
	_, err = merchants.Create(ctx, c1, "m1", "Loja")
	require.NoError(t, err)
	_, err = merchants.Fund(ctx, c1, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("100.00", "BRL"),
		Key: "f1", Reason: "seed", Actor: "test"})
	require.NoError(t, err)
	// has waits until conn's server shows m1's available BRL at balance.
	has := func(conn *pgx.Conn, balance string) {
		require.Eventually(t, func() bool {
			var ok bool
			require.NoError(t, conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM ledger_accounts
				WHERE code = 'merchant/m1/available/BRL' AND balance = $1::numeric)`, balance).Scan(&ok))
			return ok
		}, 30*time.Second, 20*time.Millisecond)
	}
	has(cr1, "100")
	has(cr2, "100")

	// r1 stops receiving (its link to p1 is cut).
	_, err = cr1.Exec(ctx, `ALTER SYSTEM SET primary_conninfo = ''`)
	require.NoError(t, err)
	_, err = cr1.Exec(ctx, `SELECT pg_reload_conf()`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, cr1.QueryRow(ctx, `SELECT count(*) FROM pg_stat_wal_receiver`).Scan(&n))
		return n == 0
	}, 30*time.Second, 50*time.Millisecond)

	// p1 acknowledges a funding (and other WAL) that only r2 receives.
	_, err = merchants.Fund(ctx, c1, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("50.00", "BRL"),
		Key: "f2", Reason: "lost in the failover", Actor: "test"})
	require.NoError(t, err)
	_, err = c1.Exec(ctx, `SELECT pg_logical_emit_message(false, 'pad', repeat('x', 4000000))`)
	require.NoError(t, err)
	var lsn string
	require.NoError(t, c1.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn))
	has(cr2, "150")
	require.Eventually(t, func() bool {
		var ok bool
		require.NoError(t, cr2.QueryRow(ctx, `SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn`, lsn).Scan(&ok))
		return ok
	}, 30*time.Second, 20*time.Millisecond)

	// Failover: p1 dies, r1 is promoted and becomes --database-url; r2 is
	// left as the read replica.
	has(cr1, "100") // and not the lost 50
	require.NoError(t, p1.Stop())
	_, err = cr1.Exec(ctx, `SELECT pg_promote(true, 60)`)
	require.NoError(t, err)

	pool, err := pgxpool.New(ctx, r1.URL("postgres"))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	rcfg, err := pgxpool.ParseConfig(r2.URL("postgres"))
	require.NoError(t, err)
	rcfg.ConnConfig.ConnectTimeout = 2 * time.Second
	rpool, err := pgxpool.NewWithConfig(ctx, rcfg)
	require.NoError(t, err)
	t.Cleanup(rpool.Close)

	psp := sim.NewServer(sim.Config{Seed: 6}).Start()
	t.Cleanup(psp.Close)
	prov := psp.NewProvider()
	e, err := engine.New(engine.Config{Pool: pool, Providers: []providers.Provider{prov}, PayoutProvider: prov.Name(),
		Attempts: attempts.Config{}})
	require.NoError(t, err)
	reads, err := replica.New(replica.Config{Primary: pool, Replica: rpool, MaxLag: 5 * time.Second, Interval: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(reads.Close)
	srv, err := api.New(api.Config{Pool: pool, Payouts: e.Payouts, Attempts: e.Attempts, Reads: reads})
	require.NoError(t, err)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	_, key, err := api.CreateKey(ctx, pool, api.RoleAdmin, "", "admin", time.Now())
	require.NoError(t, err)
	// The new primary takes a new funding.
	_, err = merchants.Fund(ctx, pool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("7.00", "BRL"),
		Key: "f3", Reason: "after the failover", Actor: "test"})
	require.NoError(t, err)
	time.Sleep(200 * time.Millisecond) // a few measurements

	var onPrimary string
	require.NoError(t, pool.QueryRow(ctx, `SELECT balance::text FROM ledger_accounts WHERE code = 'merchant/m1/available/BRL'`).Scan(&onPrimary))
	rows, err := pool.Query(ctx, `SELECT p.seq::text || ':' || p.amount::text || ':' || p.balance_after::text FROM ledger_postings p JOIN ledger_accounts a ON a.id = p.account_id WHERE a.code = 'merchant/m1/available/BRL' ORDER BY p.seq`)
	require.NoError(t, err)
	hist, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	t.Logf("primary's history of m1's available BRL: %v", hist)
	lag, known := reads.Lag()
	a := call(t, hs.URL, "GET", "/v1/merchants/m1/balances", key, "", nil)
	t.Logf("primary's balance %s; measured lag %v (known %v); answer %s (Saldo-Replica-Lag %q)",
		onPrimary, lag, known, a.body, a.header.Get(replica.LagHeader))
	require.Empty(t, a.header.Get(replica.LagHeader),
		"a standby of the old primary (another timeline) was read as a replica within %v: %s", lag, a.body)
}

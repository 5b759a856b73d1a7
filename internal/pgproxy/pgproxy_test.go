package pgproxy_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/pgproxy"
	"github.com/saldo/saldo/internal/testdb"
)

func setup(t *testing.T) (direct, proxied *pgxpool.Pool, p *pgproxy.Proxy) {
	t.Helper()
	url := testdb.NewURL(t)
	p = pgproxy.Start(t, url)
	ctx := context.Background()
	var err error
	direct, err = pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(direct.Close)
	proxied, err = pgxpool.New(ctx, p.URL(url))
	require.NoError(t, err)
	t.Cleanup(proxied.Close)
	testdb.CreateTables(t, direct, `CREATE TABLE proxied (id int PRIMARY KEY)`, "proxied")
	return direct, proxied, p
}

func count(t *testing.T, db *pgxpool.Pool) int {
	var n int
	require.NoError(t, db.QueryRow(context.Background(), `SELECT count(*) FROM proxied`).Scan(&n))
	return n
}

// An explicit transaction's COMMIT commits on the server while its client
// gets an error: the ambiguous commit.
func TestLostCommitAnswerExplicitTransaction(t *testing.T) {
	t.Parallel()
	direct, proxied, p := setup(t)
	ctx := context.Background()
	p.LoseCommitAnswer("INSERT INTO proxied", 1)
	// Statements of other transactions pass untouched.
	require.NoError(t, pgx.BeginFunc(ctx, proxied, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT 1`)
		return err
	}))
	err := pgx.BeginFunc(ctx, proxied, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO proxied (id) VALUES ($1)`, 1)
		return err
	})
	require.Error(t, err, "the client must not learn that its commit went through")
	require.Equal(t, 1, p.Cuts())
	require.Equal(t, 1, count(t, direct), "the transaction committed on the server")
	// Armed once: the next one commits and answers.
	require.NoError(t, pgx.BeginFunc(ctx, proxied, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO proxied (id) VALUES ($1)`, 2)
		return err
	}))
	require.Equal(t, 2, count(t, proxied))
}

// LoseCommitAnswerOfAll cuts only a transaction that ran every one of its
// statements: one that ran some of them commits and answers.
func TestLostCommitAnswerOfAll(t *testing.T) {
	t.Parallel()
	direct, proxied, p := setup(t)
	ctx := context.Background()
	p.LoseCommitAnswerOfAll(1, "INSERT INTO proxied", "SELECT 42")
	insert := func(id int, alsoSelect bool) error {
		return pgx.BeginFunc(ctx, proxied, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO proxied (id) VALUES ($1)`, id); err != nil {
				return err
			}
			if alsoSelect {
				_, err := tx.Exec(ctx, `SELECT 42`)
				return err
			}
			return nil
		})
	}
	require.NoError(t, insert(1, false), "one of the two statements only")
	require.Zero(t, p.Cuts())
	require.Error(t, insert(2, true))
	require.Equal(t, 1, p.Cuts())
	require.Equal(t, 2, count(t, direct), "the cut transaction committed on the server")
	require.NoError(t, insert(3, true), "armed once")
}

// A statement outside BEGIN is its own transaction: its Sync is the commit.
// Preparing the statement (first use on a connection) does not trigger.
func TestLostCommitAnswerImplicitTransaction(t *testing.T) {
	t.Parallel()
	direct, proxied, p := setup(t)
	ctx := context.Background()
	p.LoseCommitAnswer("INSERT INTO proxied", 1)
	_, err := proxied.Exec(ctx, `INSERT INTO proxied (id) VALUES ($1)`, 1)
	require.Error(t, err)
	require.Equal(t, 1, p.Cuts())
	require.Equal(t, 1, count(t, direct))

	// A pipelined batch without BEGIN is one implicit transaction.
	p.LoseCommitAnswer("INSERT INTO proxied", 1)
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO proxied (id) VALUES ($1)`, 2)
	b.Queue(`INSERT INTO proxied (id) VALUES ($1)`, 3)
	require.Error(t, proxied.SendBatch(ctx, b).Close())
	require.Equal(t, 2, p.Cuts())
	require.Equal(t, 3, count(t, direct))
}

// The random mode loses commit answers at the given rate (every one at
// rate 1), and CutConnection cuts a live connection: its client sees an
// error, the pool reconnects and later statements pass.
func TestRandomCommitLossAndCutConnection(t *testing.T) {
	t.Parallel()
	direct, proxied, p := setup(t)
	ctx := context.Background()
	p.SetRandom(pgproxy.Random{CommitAnswerLoss: 1, Seed: 7})
	_, err := proxied.Exec(ctx, `INSERT INTO proxied (id) VALUES ($1)`, 1)
	require.Error(t, err)
	require.Equal(t, 1, p.RandomCuts())
	require.Equal(t, 1, p.Cuts())
	require.Equal(t, 1, count(t, direct), "the transaction committed on the server")
	p.SetRandom(pgproxy.Random{}) // off
	_, err = proxied.Exec(ctx, `INSERT INTO proxied (id) VALUES ($1)`, 2)
	require.NoError(t, err)

	conn, err := proxied.Acquire(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, p.Conns(), 1)
	require.True(t, p.CutConnection(func(n int) int { return 0 }))
	for p.Conns() > 0 && p.CutConnection(func(int) int { return 0 }) {
	}
	_, err = conn.Exec(ctx, `SELECT 1`)
	require.Error(t, err, "a cut connection fails its next statement")
	conn.Release()
	_, err = proxied.Exec(ctx, `INSERT INTO proxied (id) VALUES ($1)`, 3)
	require.NoError(t, err, "the pool reconnects through the proxy")
	require.Equal(t, 3, count(t, direct))
	require.GreaterOrEqual(t, p.CutAll(), 1)
}

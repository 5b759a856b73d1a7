package payouts_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
)

// sqlRecorder is a pgx tracer that keeps the text of every statement its
// connections send (each query and exec, BEGIN and COMMIT included, each
// query of a batch, each COPY), as ledgerbench.StatementCounter counts them.
type sqlRecorder struct {
	mu   sync.Mutex
	sqls []string
}

func (r *sqlRecorder) add(sql string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sqls = append(r.sqls, sql)
}

func (r *sqlRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.add(d.SQL)
	return ctx
}
func (r *sqlRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *sqlRecorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (r *sqlRecorder) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	r.add(d.SQL)
}
func (r *sqlRecorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
func (r *sqlRecorder) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceCopyFromStartData) context.Context {
	r.add("COPY " + d.TableName.Sanitize())
	return ctx
}
func (r *sqlRecorder) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

// during returns the statements sent while f ran, each on one line,
// without River's insert notifications (PGNotifyMany): River sends one
// per queue at most every so often, so whether a request carries it says
// nothing about the request.
func (r *sqlRecorder) during(f func()) []string {
	r.mu.Lock()
	from := len(r.sqls)
	r.mu.Unlock()
	f()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, s := range r.sqls[from:] {
		if !strings.Contains(s, "name: PGNotifyMany") {
			out = append(out, strings.Join(strings.Fields(s), " "))
		}
	}
	return out
}

// heads are the first 60 characters of each statement, for messages.
func heads(sqls []string) string {
	var b strings.Builder
	for _, s := range sqls {
		b.WriteString("\n  " + s[:min(len(s), 60)])
	}
	return b.String()
}

// tracedService is a payouts Service (with charges) whose pool records
// every statement it sends; the attempts opened run in its transactions.
func (e *env) tracedService(t *testing.T) (*payouts.Service, *sqlRecorder) {
	t.Helper()
	rec := &sqlRecorder{}
	cfg := e.pool.Config()
	cfg.ConnConfig.Tracer = rec
	pool, err := pgxpool.NewWithConfig(e.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ch, err := charges.New(charges.Config{Pool: pool, Attempts: e.att, Provider: e.prov.Name(), Clock: e.clock})
	require.NoError(t, err)
	svc, err := payouts.New(payouts.Config{Pool: pool, Attempts: e.att, Provider: e.prov.Name(), Clock: e.clock, Charges: ch})
	require.NoError(t, err)
	return svc, rec
}

// clientKeyStatements are the statements of sqls that touch the client
// keys' table.
func clientKeyStatements(sqls []string) []string {
	var out []string
	for _, s := range sqls {
		if strings.Contains(s, "payout_requests") {
			out = append(out, s)
		}
	}
	return out
}

// R4: an accepted refund or split under a client key costs exactly its
// claim (one INSERT in the opening transaction) more than the same request
// without a key: the key is looked up only when a check before the
// transaction refuses the request (for a repeat whose own reserve took the
// balance, TestRefundRepeatedOnAnotherProcessGetsTheRefund,
// TestSplitRepeatedOnAnotherProcessGetsTheSplit), as CreatePayout and
// charges.Create do; one more statement per request in front of the
// opening halves a group-commit batcher (docs/pitfalls.md). A repeat that
// passes the checks is answered by the claim: the same object, reserved
// once; the key with another request is a conflict.
func TestAcceptedRefundAndSplitLookNoClientKeyUp_R4(t *testing.T) {
	t.Parallel()
	e, c := refundEnv(t) // available 600.00
	svc, rec := e.tracedService(t)
	refund := func(key string) payouts.RefundRequest {
		return payouts.RefundRequest{MerchantID: merchant, ChargeID: c.ID, Amount: brl("10.00"), ClientKey: key}
	}
	// keyCostsItsClaimOnly: once create has warmed the service's caches,
	// a new request with a key makes the statements of one without, plus
	// the key's claim, and never looks the key up first.
	keyCostsItsClaimOnly := func(what string, create func(key string) error) {
		t.Helper()
		require.NoError(t, create("")) // warms the service's caches
		var err error
		unkeyed := rec.during(func() { err = create("") })
		require.NoError(t, err)
		keyed := rec.during(func() { err = create(what + "-stmts") })
		require.NoError(t, err)
		require.Equal(t, []string{"INSERT INTO payout_requests (merchant_id, client_key, request_hash, object_kind, object_id, created_at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING"},
			clientKeyStatements(keyed), "a new %s's key is claimed, never looked up first", what)
		require.Equal(t, len(unkeyed)+1, len(keyed), "the key costs its claim only; without a key:%s\nwith one:%s",
			heads(unkeyed), heads(keyed))
		t.Logf("%s: %d statements without a key, %d with one", what, len(unkeyed), len(keyed))
	}
	var r1 payouts.Payout
	keyCostsItsClaimOnly("refund", func(key string) error {
		p, err := svc.CreateRefund(e.ctx, refund(key))
		if key != "" {
			r1 = p
		}
		return err
	})

	again, err := svc.CreateRefund(e.ctx, refund("refund-stmts"))
	require.NoError(t, err)
	require.Equal(t, r1.ID, again.ID, "a repeat is answered by its claim")
	other := refund("refund-stmts")
	other.Amount = brl("11.00")
	_, err = svc.CreateRefund(e.ctx, other)
	require.ErrorIs(t, err, payouts.ErrIdempotencyConflict)
	_, reserved := e.balances()
	require.Equal(t, "30.00", reserved, "three refunds of 10.00 reserved, the repeat none")

	leg := func(amount, email string) payouts.SplitLeg {
		return payouts.SplitLeg{Operation: providers.OpPixTransfer, Amount: brl(amount), Destination: pixTo(email)}
	}
	split := func(key string) payouts.SplitRequest {
		return payouts.SplitRequest{MerchantID: merchant, ClientKey: key,
			Legs: []payouts.SplitLeg{leg("6.00", "a@example.com"), leg("4.00", "b@example.com")}}
	}
	var sp payouts.Split
	keyCostsItsClaimOnly("split", func(key string) error {
		p, err := svc.CreateSplit(e.ctx, split(key))
		if key != "" {
			sp = p
		}
		return err
	})

	againSp, err := svc.CreateSplit(e.ctx, split("split-stmts"))
	require.NoError(t, err)
	require.Equal(t, sp.ID, againSp.ID, "a repeat is answered by its claim")
	changed := split("split-stmts")
	changed.Legs[1].Amount = brl("5.00")
	_, err = svc.CreateSplit(e.ctx, changed)
	require.ErrorIs(t, err, payouts.ErrIdempotencyConflict)
	_, reserved = e.balances()
	require.Equal(t, "60.00", reserved, "three splits of 10.00 reserved, the repeat none")

	// Everything settles, so the audit that closes the test is clean.
	rows, err := e.pool.Query(e.ctx, `SELECT id FROM attempts WHERE status = 'pending' ORDER BY id`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	require.Len(t, ids, 9) // three refunds, three splits of two legs
	for _, id := range ids {
		res, err := e.att.Execute(e.ctx, id)
		require.NoError(t, err)
		require.Equal(t, attempts.StatusSucceeded, res.Attempt.Status)
	}
}

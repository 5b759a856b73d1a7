package ledger_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/ledger"
)

// rewriteHistory runs stmts as a superuser with every trigger off (what
// the tables' owner can do) and then rewrites the named accounts' chains
// consistently from their first posting: each balance_after, hash and the
// account's head recomputed in the documented v2 format, as an attacker
// who knows it would, so that Verify finds nothing.
func rewriteHistory(t *testing.T, ctx context.Context, f fixture, codes []string, stmts ...string) {
	t.Helper()
	admin, err := pgx.Connect(ctx, testdb.AdminURL(t, f.pool))
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, `SET session_replication_role = replica`)
	require.NoError(t, err)
	for _, s := range stmts {
		_, err = admin.Exec(ctx, s)
		require.NoError(t, err, s)
	}
	for _, code := range codes {
		var id int64
		var version int
		var prev []byte
		require.NoError(t, admin.QueryRow(ctx, `SELECT id, chain_version, chain_genesis FROM ledger_accounts WHERE code = $1`,
			code).Scan(&id, &version, &prev))
		require.Equal(t, 2, version, "the rewrite writes v2 chains only")
		type posting struct {
			seq       int64
			fields    []string
			afterText string
		}
		rows, err := admin.Query(ctx, `SELECT p.seq, p.transaction_id, p.leg, trim_scale(p.amount)::text, p.currency,
			(extract(epoch FROM p.posted_at) * 1000000)::bigint, t.cause_kind, coalesce(t.reverses_id, 0), t.cause_id, t.idempotency_key,
			trim_scale(sum(p.amount) OVER (ORDER BY p.seq))::text
			FROM ledger_postings p JOIN ledger_transactions t ON t.id = p.transaction_id
			WHERE p.account_id = $1 ORDER BY p.seq`, id)
		require.NoError(t, err)
		var ps []posting
		var last string
		for rows.Next() {
			var seq, tx, micros, reverses int64
			var leg int
			var amount, cur, kind, cause, key, after string
			require.NoError(t, rows.Scan(&seq, &tx, &leg, &amount, &cur, &micros, &kind, &reverses, &cause, &key, &after))
			ps = append(ps, posting{seq: seq, afterText: after, fields: []string{"saldo-ledger-posting-v2",
				strconv.FormatInt(id, 10), strconv.FormatInt(seq, 10), strconv.FormatInt(tx, 10), strconv.Itoa(leg),
				amount, cur, after, strconv.FormatInt(micros, 10), kind, strconv.FormatInt(reverses, 10),
				strconv.Itoa(utf8.RuneCountInString(cause)), cause, strconv.Itoa(utf8.RuneCountInString(key)), key}})
			last = after
		}
		require.NoError(t, rows.Err())
		for _, p := range ps {
			h := sha256.Sum256(append([]byte(strings.Join(p.fields, "|")), prev...))
			prev = h[:]
			_, err := admin.Exec(ctx, `UPDATE ledger_postings SET balance_after = $3::numeric, hash = $4 WHERE account_id = $1 AND seq = $2`,
				id, p.seq, p.afterText, prev)
			require.NoError(t, err)
		}
		if last == "" {
			last = "0"
		}
		_, err = admin.Exec(ctx, `UPDATE ledger_accounts SET balance = $2::numeric, last_seq = $3, last_hash = $4,
			last_posted_at = (SELECT max(posted_at) FROM ledger_postings WHERE account_id = $1) WHERE id = $1`,
			id, last, int64(len(ps)), prev)
		require.NoError(t, err)
	}
}

func takeSeal(t *testing.T, ctx context.Context, f fixture) []byte {
	t.Helper()
	var buf bytes.Buffer
	sum, err := ledger.WriteSeal(ctx, f.pool, &buf, time.Now())
	require.NoError(t, err)
	require.Len(t, sum.Digest, 64)
	return buf.Bytes()
}

func checkSeal(t *testing.T, ctx context.Context, f fixture, seal []byte) ledger.Report {
	t.Helper()
	sum, rep, err := ledger.VerifySeal(ctx, f.pool, bytes.NewReader(seal))
	require.NoError(t, err)
	require.Equal(t, sum.Accounts, rep.Accounts)
	return rep
}

// R22, R23: the hash chains catch a changed posting, but not someone who
// can bypass the triggers (the tables' owner) and rewrites whole chains
// consistently: Verify is clean after such a rewrite, by construction. A
// seal taken before it and kept outside the database catches it: a
// changed amount in history before the seal is a seal_mismatch on both
// accounts; history deleted after one seal but before another shortens
// the second seal's accounts and leaves the first's intact. History
// written after a seal is not the seal's to judge: it stays clean.
func TestSealCatchesAConsistentRewriteOfHistory_R22_R23(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	a := f.merchant(t, ctx, "a", "100.00")
	b := f.merchant(t, ctx, "b", "")
	_, err := ledger.Post(ctx, f.pool, transfer("t1", a.Code, b.Code, "10.00"))
	require.NoError(t, err)
	_, err = ledger.Post(ctx, f.pool, transfer("t2", a.Code, b.Code, "5.00"))
	require.NoError(t, err)

	first := takeSeal(t, ctx, f)
	rep := checkSeal(t, ctx, f, first)
	require.True(t, rep.OK(), "%v", rep.Violations)
	require.EqualValues(t, 3, rep.Accounts)

	_, err = ledger.Post(ctx, f.pool, transfer("t3", a.Code, b.Code, "1.00"))
	require.NoError(t, err)
	second := takeSeal(t, ctx, f)
	rep = checkSeal(t, ctx, f, first)
	require.True(t, rep.OK(), "history written after a seal is not a violation: %v", rep.Violations)

	// t3 deleted, both chains made consistent again.
	rewriteHistory(t, ctx, f, []string{a.Code, b.Code},
		`DELETE FROM ledger_postings WHERE transaction_id = (SELECT id FROM ledger_transactions WHERE idempotency_key = 't3')`,
		`DELETE FROM ledger_transactions WHERE idempotency_key = 't3'`)
	requireClean(t, ctx, f.pool)
	require.Equal(t, "85.00", balance(t, ctx, f.pool, a.Code))
	rep = checkSeal(t, ctx, f, first)
	require.True(t, rep.OK(), "history before the first seal is intact: %v", rep.Violations)
	rep = checkSeal(t, ctx, f, second)
	require.Equal(t, map[ledger.ViolationKind]int64{ledger.ViolationSealShortened: 2}, nonZero(rep.Counts), "%v", rep.Violations)

	// t1 made 1.00 instead of 10.00 on both legs, the chains rewritten.
	rewriteHistory(t, ctx, f, []string{a.Code, b.Code},
		`UPDATE ledger_postings SET amount = sign(amount) * 1.00
		 WHERE transaction_id = (SELECT id FROM ledger_transactions WHERE idempotency_key = 't1')`)
	requireClean(t, ctx, f.pool)
	require.Equal(t, "94.00", balance(t, ctx, f.pool, a.Code))
	rep = checkSeal(t, ctx, f, first)
	require.Equal(t, map[ledger.ViolationKind]int64{ledger.ViolationSealMismatch: 2}, nonZero(rep.Counts), "%v", rep.Violations)
	for _, v := range rep.Violations {
		require.Contains(t, []string{a.Code, b.Code}, v.AccountCode)
	}

	// An account sealed and then deleted with its history.
	rewriteHistory(t, ctx, f, nil,
		`DELETE FROM ledger_postings WHERE account_id = (SELECT id FROM ledger_accounts WHERE code = '`+b.Code+`')`,
		`DELETE FROM ledger_accounts WHERE code = '`+b.Code+`'`)
	rep = checkSeal(t, ctx, f, first)
	require.EqualValues(t, 1, rep.Counts[ledger.ViolationSealAccountMissing], "%v", rep.Violations)
}

func nonZero(m map[ledger.ViolationKind]int64) map[ledger.ViolationKind]int64 {
	out := map[ledger.ViolationKind]int64{}
	for k, n := range m {
		if n > 0 {
			out[k] = n
		}
	}
	return out
}

// A seal file that is not whole and unedited tells nothing about the
// ledger: it is refused as ErrBadSeal (saldo audit verify exits 2, "could
// not run"), never read as a clean ledger or as violations.
func TestSealFileDamagedIsRefused_R22(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	a := f.merchant(t, ctx, "a", "100.00")
	seal := takeSeal(t, ctx, f)
	lines := strings.SplitAfter(string(seal), "\n")
	require.Len(t, lines, 5) // header, funding, a, trailer, ""

	edited := strings.Replace(string(seal), `"balance":"100"`, `"balance":"900"`, 1)
	require.NotEqual(t, string(seal), edited)
	for name, body := range map[string]string{
		"empty":          "",
		"not a seal":     `{"format":"something-else"}` + "\n",
		"cut short":      strings.Join(lines[:3], ""),
		"edited":         edited,
		"line dropped":   lines[0] + lines[2] + lines[3],
		"line after end": string(seal) + lines[1],
		"unknown field":  strings.Replace(string(seal), `"seq":`, `"extra":1,"seq":`, 1),
		"bad balance":    strings.Replace(string(seal), `"balance":"100"`, `"balance":"1e9"`, 1),
	} {
		_, _, err := ledger.VerifySeal(ctx, f.pool, strings.NewReader(body))
		require.ErrorIs(t, err, ledger.ErrBadSeal, name)
	}
	rep := checkSeal(t, ctx, f, seal)
	require.True(t, rep.OK(), "%v", rep.Violations)
	require.Contains(t, string(seal), a.Code)
}

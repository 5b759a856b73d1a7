package main

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
)

// `saldo audit verify` runs the ledger's reversal checks (package audit,
// area "ledger") on ledger.Verify's line, and the refunds checks on a line
// of their own: one line per area. A "reversal" of half a funding, posted
// through ledger_post, makes the ledger line fail with reversal_mirror
// (R22).
func TestAuditVerifyReportsReversalsOnTheLedgerLine_R22(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	_, err := merchants.Create(ctx, pool, "m1", "Loja")
	require.NoError(t, err)
	f, err := merchants.Fund(ctx, pool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("100.00", "BRL"),
		Key: "k", Reason: "test", Actor: "test"})
	require.NoError(t, err)

	var out bytes.Buffer
	ok, err := auditVerify(ctx, pool, &out)
	require.NoError(t, err)
	require.True(t, ok, out.String())
	require.Len(t, regexp.MustCompile(`(?m)^ledger +OK`).FindAllString(out.String(), -1), 1, out.String())
	require.Regexp(t, `(?m)^refunds +OK`, out.String())

	var ids []int64
	var amounts []string
	for _, p := range f.Postings {
		ids, amounts = append(ids, p.AccountID), append(amounts, p.Amount.Neg().Div(decimal.NewFromInt(2)).String())
	}
	_, err = pool.Exec(ctx, `SELECT * FROM ledger_post('half', 'reversal', $1, '', '{}', NULL, $2, $3,
		ARRAY['', ''], $4::numeric[], ARRAY['BRL', 'BRL'])`, strconv.FormatInt(f.ID, 10), f.ID, ids, amounts)
	require.NoError(t, err)
	out.Reset()
	ok, err = auditVerify(ctx, pool, &out)
	require.NoError(t, err)
	require.False(t, ok, out.String())
	require.Regexp(t, `(?m)^ledger +FAILED`, out.String())
	require.Len(t, regexp.MustCompile(`(?m)^ledger `).FindAllString(out.String(), -1), 1, "one line per area:\n%s", out.String())
	require.Contains(t, out.String(), "reversal_mirror")
	require.Contains(t, out.String(), "VIOLATIONS FOUND")
}

// A line whose checks come from two places (ledger.Verify and package
// audit's reversals) reports what one found even when the other could not
// run, and the command exits 1 (violations), not 2: an error in one query
// never hides a violation the other found.
func TestAuditVerifyKeepsViolationsOfALinePartlyRun(t *testing.T) {
	t.Parallel()
	found := func(context.Context, *pgxpool.Pool) (string, []violation, error) {
		return "1 account", []violation{{Kind: "reversal_mirror", Detail: "tx 7 reverses 3 but is not its negation"}}, nil
	}
	broke := func(context.Context, *pgxpool.Pool) (string, []violation, error) {
		return "", nil, errors.New("statement timeout")
	}
	for name, run := range map[string]func(context.Context, *pgxpool.Pool) (string, []violation, error){
		"second fails": alsoRun(found, broke),
		"first fails":  alsoRun(broke, found),
	} {
		var out bytes.Buffer
		ok, err := runAuditChecks(context.Background(), nil, &out, []auditCheck{{Name: "ledger", Run: run}})
		require.NoError(t, err, name)
		require.False(t, ok, name)
		s := out.String()
		require.Contains(t, s, "statement timeout", name)
		require.Contains(t, s, "tx 7 reverses 3", name)
		require.Contains(t, s, "VIOLATIONS FOUND (and some checks could not run)", name)
		require.Equal(t, 1, strings.Count(s, "- reversal_mirror: "), name) // listed once
	}
	// Nothing found and one part broken: could not run.
	var out bytes.Buffer
	ok, err := runAuditChecks(context.Background(), nil, &out, []auditCheck{{Name: "ledger", Run: alsoRun(broke,
		func(context.Context, *pgxpool.Pool) (string, []violation, error) { return "", nil, nil })}})
	require.Error(t, err)
	require.False(t, ok)
}

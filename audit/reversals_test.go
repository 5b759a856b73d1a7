package audit_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
)

// fundings makes a database with merchant m1 and n fundings of 100.00 BRL,
// returned in order.
func fundings(t *testing.T, n int) (*pgxpool.Pool, []ledger.Transaction) {
	t.Helper()
	ctx := context.Background()
	pool := testdb.New(t)
	_, err := merchants.Create(ctx, pool, "m1", "Loja")
	require.NoError(t, err)
	var out []ledger.Transaction
	for i := range n {
		f, err := merchants.Fund(ctx, pool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("100.00", "BRL"),
			Key: "fund-" + itoa(i), Reason: "test", Actor: "test"})
		require.NoError(t, err)
		out = append(out, f)
	}
	return pool, out
}

// rawReversal calls the ledger's write function as a writer that builds
// its own "reversal" would: reverses set, legs of its own choosing.
func rawReversal(t *testing.T, pool *pgxpool.Pool, key string, reverses int64, causeKind, causeID string, legs []ledger.Posting) int64 {
	t.Helper()
	var ids []int64
	var codes, curs []string
	var amounts []decimal.Decimal
	for _, l := range legs {
		ids, codes = append(ids, l.AccountID), append(codes, "")
		amounts, curs = append(amounts, l.Amount), append(curs, l.Currency.Code())
	}
	var id int64
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT DISTINCT transaction_id FROM ledger_post($1, $2, $3, '', '{}',
		NULL, $4, $5, $6, $7, $8) WHERE outcome = 'posted'`, key, causeKind, causeID, reverses, ids, codes, amounts, curs).Scan(&id))
	return id
}

// A healthy database with reversals made by ledger.Reverse (of fundings:
// saldo's own money paths never reverse, payouts effect_reversed) passes
// the ledger's reversal checks.
func TestAuditReversalsOnAHealthyDatabase_R22(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, fs := fundings(t, 3)
	for _, f := range fs[:2] {
		_, err := ledger.Reverse(ctx, pool, f.ID, "reverse-"+itoa(f.ID), "funded by mistake")
		require.NoError(t, err)
	}
	requireAuditOK(t, pool)
	vs, err := audit.Reversals.Run(ctx, pool)
	require.NoError(t, err)
	require.Empty(t, vs)
}

// ledger/reversal_mirror (R22): a "reversal" through ledger_post whose legs
// are not the original's negated (half the amount; and, for another, the
// right amounts on other accounts) is reported. Each balances on its own,
// so the ledger's replay and every other check held, and the audit said OK
// about a correction that corrects something else.
func TestAuditReportsAReversalThatIsNotItsOriginalsNegation_R22(t *testing.T) {
	t.Parallel()
	pool, fs := fundings(t, 2)
	requireAuditOK(t, pool)

	half := []ledger.Posting{
		{AccountID: fs[0].Postings[0].AccountID, Amount: fs[0].Postings[0].Amount.Neg().Div(decimal.NewFromInt(2)), Currency: money.BRL},
		{AccountID: fs[0].Postings[1].AccountID, Amount: fs[0].Postings[1].Amount.Neg().Div(decimal.NewFromInt(2)), Currency: money.BRL},
	}
	r1 := rawReversal(t, pool, "half", fs[0].ID, ledger.CauseReversal, itoa(fs[0].ID), half)
	swapped := []ledger.Posting{ // the same amounts, each on the other leg's account
		{AccountID: fs[1].Postings[1].AccountID, Amount: fs[1].Postings[0].Amount.Neg(), Currency: money.BRL},
		{AccountID: fs[1].Postings[0].AccountID, Amount: fs[1].Postings[1].Amount.Neg(), Currency: money.BRL},
	}
	// The swap doubles the funding (m1's available +100 more): the
	// platform's funding account may go negative, m1's may not.
	r2 := rawReversal(t, pool, "swapped", fs[1].ID, ledger.CauseReversal, itoa(fs[1].ID), swapped)
	requireOnly(t, pool, "ledger/reversal_mirror",
		[]string{"ledger transaction " + itoa(r1) + " reverses " + itoa(fs[0].ID) + " but is not its negation", "leg 1:", "leg 2:"},
		[]string{"ledger transaction " + itoa(r2) + " reverses " + itoa(fs[1].ID) + " but is not its negation", "leg 1:", "leg 2:"})
}

// ledger/reversal_link (R22): a transaction that reverses another under
// another cause, and a "reversal" cause that reverses nothing (the API's
// statement shows its cause id as the reversed transaction), are reported.
func TestAuditReportsAReversalLinkThatDisagreesWithItsCause_R22(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, fs := fundings(t, 2)
	requireAuditOK(t, pool)

	neg := func(f ledger.Transaction) []ledger.Posting {
		var out []ledger.Posting
		for _, p := range f.Postings {
			out = append(out, ledger.Posting{AccountID: p.AccountID, Amount: p.Amount.Neg(), Currency: p.Currency})
		}
		return out
	}
	r1 := rawReversal(t, pool, "other-cause", fs[0].ID, "adjustment", "ticket-7", neg(fs[0]))
	var in []ledger.PostingInput
	for _, p := range neg(fs[1]) {
		in = append(in, ledger.PostingInput{AccountID: p.AccountID, Amount: p.Amount, Currency: p.Currency})
	}
	r2, err := ledger.Post(ctx, pool, ledger.TransactionInput{IdempotencyKey: "unlinked", CauseKind: ledger.CauseReversal,
		CauseID: itoa(fs[1].ID), Postings: in})
	require.NoError(t, err)
	requireOnly(t, pool, "ledger/reversal_link",
		[]string{"ledger transaction " + itoa(r1) + " reverses " + itoa(fs[0].ID) + " but its cause is adjustment ticket-7"},
		[]string{"ledger transaction " + itoa(r2.ID) + " has cause reversal of " + itoa(fs[1].ID) + " but reverses nothing"})
}

// ledger/reversed_twice (R22): an original reversed twice gives the money
// back twice. ledger_post refuses it and the unique index
// ledger_transactions_reverses forbids it; with the index dropped and a
// second exact reversal linked by hand, the audit reports it (and nothing
// else: each reversal is a perfect mirror).
func TestAuditReportsATransactionReversedTwice_R22(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, fs := fundings(t, 2)
	first, err := ledger.Reverse(ctx, pool, fs[0].ID, "reverse-once", "funded by mistake")
	require.NoError(t, err)
	_, err = ledger.Reverse(ctx, pool, fs[0].ID, "reverse-twice", "again")
	require.ErrorIs(t, err, ledger.ErrAlreadyReversed, "the ledger refuses a second reversal")
	requireAuditOK(t, pool)

	var in []ledger.PostingInput
	for _, p := range fs[0].Postings {
		in = append(in, ledger.PostingInput{AccountID: p.AccountID, Amount: p.Amount.Neg(), Currency: p.Currency})
	}
	second, err := ledger.Post(ctx, pool, ledger.TransactionInput{IdempotencyKey: "second", CauseKind: ledger.CauseReversal,
		CauseID: itoa(fs[0].ID), Postings: in})
	require.NoError(t, err)
	w := &refundWorld{t: t, ctx: ctx, pool: pool}
	w.tamper(`DROP INDEX ledger_transactions_reverses`,
		`UPDATE ledger_transactions SET reverses_id = `+itoa(fs[0].ID)+` WHERE id = `+itoa(second.ID))
	// The v2 hash chain (migration 00108) covers reverses_id too: the
	// rewritten link also breaks the chain of second's two postings.
	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	var twice, chain int
	for _, v := range res.Violations {
		switch v.Area + "/" + v.Check {
		case "ledger/reversed_twice":
			twice++
			require.Contains(t, v.Detail, "ledger transaction "+itoa(fs[0].ID)+" is reversed 2 times: by "+itoa(first.ID)+", "+itoa(second.ID))
		case "ledger/hash_chain_broken":
			chain++
			require.Contains(t, v.Detail, "tx="+itoa(second.ID), res.Summary())
		default:
			t.Fatalf("only reversed_twice and the chain of the rewritten transaction are broken; the audit says: %s", res.Summary())
		}
	}
	require.Equal(t, 1, twice, res.Summary())
	require.Equal(t, 2, chain, res.Summary())
}

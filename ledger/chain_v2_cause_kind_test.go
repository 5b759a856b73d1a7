package ledger_test

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
)

// R22, migration 00108: the v2 posting input is
// ...|cause_kind|reversed id or 0|len(cause_id)|cause_id|len(key)|key.
// Only cause_id and key are length-prefixed; cause_kind is trusted to be "a
// lowercase word" (no '|'), which the write functions check but neither the
// table nor ledger.Verify does. A stored cause_kind holding '|' can absorb
// the fields after it, so another (cause_kind, cause, key) gives the very
// same hash input: a key whose tail spells "|0|5|hello|3|abc" can later be
// rewritten into cause_id "hello", key "abc" without breaking the chain.
// docs/architecture.md: "no other cause and key give the same input ...
// changing a transaction's key ... breaks a v2 chain". Verify now reports
// such a cause kind (malformed_transaction); before, Verify and the whole
// audit were clean (found by review).
func TestChainV2CauseKindAbsorbingCauseAndKeyIsReported_R22(t *testing.T) {
	t.Parallel()
	ctx, f := setup(t)
	a := f.merchant(t, ctx, "a", "")
	key := "funding:a:k1|0|5|hello|3|abc" // a client's Idempotency-Key may hold '|'
	_, err := ledger.Post(ctx, f.pool, ledger.TransactionInput{IdempotencyKey: key, CauseKind: "funding", CauseID: "a",
		Postings: []ledger.PostingInput{
			{AccountCode: f.funding.Code, Amount: dec("-10.00"), Currency: money.BRL},
			{AccountCode: a.Code, Amount: dec("10.00"), Currency: money.BRL},
		}})
	require.NoError(t, err)
	requireClean(t, ctx, f.pool)

	admin, err := pgx.Connect(ctx, testdb.AdminURL(t, f.pool))
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, `SET session_replication_role = replica`)
	require.NoError(t, err)
	// The same text re-parsed: cause_kind absorbs "funding|0|1|a|<len>|funding:a:k1".
	kind := fmt.Sprintf("funding|0|1|a|%d|funding:a:k1", len(key))
	tag, err := admin.Exec(ctx, `UPDATE ledger_transactions SET cause_kind = $1, cause_id = 'hello', idempotency_key = 'abc'
		WHERE idempotency_key = $2`, kind, key)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())

	rep, err := ledger.Verify(ctx, f.pool)
	require.NoError(t, err)
	assert.False(t, rep.OK(), "the transaction's cause, kind and key were rewritten (cause a -> hello, key %q -> abc) "+
		"and Verify reports nothing: the v2 encoding is ambiguous once cause_kind holds '|'", key)
	// Nor does the whole audit (no other check reads a funding's cause).
	res, err := audit.Run(ctx, f.pool)
	require.NoError(t, err)
	assert.False(t, res.OK(), "audit.Run says: %s", res.Summary())
}

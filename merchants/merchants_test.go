package merchants_test

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
)

func TestCreateAndFund(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)

	_, err := merchants.Create(ctx, pool, "Bad Id", "x")
	require.ErrorIs(t, err, merchants.ErrInvalid)
	_, err = merchants.Create(ctx, pool, "m1", " ")
	require.ErrorIs(t, err, merchants.ErrInvalid)
	m, err := merchants.Create(ctx, pool, "m1", "Loja da Ana")
	require.NoError(t, err)
	require.Equal(t, "m1", m.ID)
	_, err = merchants.Create(ctx, pool, "m1", "again")
	require.ErrorIs(t, err, merchants.ErrExists)
	_, err = merchants.Get(ctx, pool, "m2")
	require.ErrorIs(t, err, merchants.ErrNotFound)
	list, err := merchants.List(ctx, pool, "", 10)
	require.NoError(t, err)
	require.Len(t, list, 1)

	brl := func(s string) money.Amount { return money.MustParse(s, "BRL") }
	f := merchants.Funding{MerchantID: "m1", Amount: brl("50.00"), Key: "k1", Reason: "initial deposit", Actor: "admin"}
	tx1, err := merchants.Fund(ctx, pool, f)
	require.NoError(t, err)
	again, err := merchants.Fund(ctx, pool, f)
	require.NoError(t, err)
	require.Equal(t, tx1.ID, again.ID, "the same key funds once")
	_, err = merchants.Fund(ctx, pool, merchants.Funding{MerchantID: "m1", Amount: brl("-60.00"), Key: "k2", Reason: "withdraw", Actor: "admin"})
	require.ErrorIs(t, err, ledger.ErrInsufficientFunds, "a negative adjustment cannot overdraw")
	_, err = merchants.Fund(ctx, pool, merchants.Funding{MerchantID: "m1", Amount: brl("-20.00"), Key: "k3", Reason: "withdraw", Actor: "admin"})
	require.NoError(t, err)
	for _, bad := range []merchants.Funding{
		{MerchantID: "m1", Amount: brl("0.00"), Key: "k", Reason: "r", Actor: "a"},
		{MerchantID: "m1", Amount: brl("1.00"), Key: "", Reason: "r", Actor: "a"},
		{MerchantID: "m1", Amount: brl("1.00"), Key: "k4", Reason: "", Actor: "a"},
	} {
		_, err := merchants.Fund(ctx, pool, bad)
		require.ErrorIs(t, err, merchants.ErrInvalid)
	}
	_, err = merchants.Fund(ctx, pool, merchants.Funding{MerchantID: "nobody", Amount: brl("1.00"), Key: "k", Reason: "r", Actor: "a"})
	require.ErrorIs(t, err, merchants.ErrNotFound)

	b, err := ledger.MerchantBalanceIn(ctx, pool, "m1", brl("1").Currency())
	require.NoError(t, err)
	require.Equal(t, "30.00", b.Available.StringFixed(2))
	rep, err := ledger.Verify(ctx, pool)
	require.NoError(t, err)
	require.True(t, rep.OK())
}

// A name's limit is counted in characters, not bytes: 200 "ç" (400 bytes)
// are accepted, 201 are not; invalid UTF-8 and NUL are refused before the
// database sees them (PostgreSQL would answer an error, a 500 upstream).
func TestCreateNameLimitsInCharacters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	m, err := merchants.Create(ctx, pool, "m1", strings.Repeat("ç", 200))
	require.NoError(t, err)
	require.Equal(t, 200, utf8.RuneCountInString(m.Name))
	for name, bad := range map[string]string{
		"201 chars": strings.Repeat("ç", 201), "invalid utf-8": "Loja \xff", "NUL": "Loja\x00",
	} {
		_, err := merchants.Create(ctx, pool, "m2", bad)
		require.ErrorIs(t, err, merchants.ErrInvalid, name)
	}
	_, err = merchants.Get(ctx, pool, "m2")
	require.ErrorIs(t, err, merchants.ErrNotFound)
}

// R4: a funding's ledger key is "funding:<merchant>:<key id>:<Idempotency-Key>"
// while it fits the ledger's 255 characters (every funding posted before
// keeps matching its repeat), and "funding:<merchant>:<key id>:sha256:<hex>"
// beyond.
func TestClientFundingKey(t *testing.T) {
	t.Parallel()
	require.Equal(t, "key_1:abc", merchants.ClientFundingKey("m1", "key_1", "abc"))
	// "funding:m1:key_1:" is 17 characters: 238 more fit exactly.
	fits := strings.Repeat("k", 238)
	require.Equal(t, "key_1:"+fits, merchants.ClientFundingKey("m1", "key_1", fits))
	long := merchants.ClientFundingKey("m1", "key_1", fits+"k")
	require.Regexp(t, `^key_1:sha256:[0-9a-f]{64}$`, long)
	require.NotEqual(t, long, merchants.ClientFundingKey("m1", "key_1", fits+"j"))
	require.Equal(t, long, merchants.ClientFundingKey("m1", "key_1", fits+"k"))
	// A longer merchant id moves the boundary with it.
	require.Regexp(t, `^key_1:sha256:`, merchants.ClientFundingKey("m12", "key_1", fits))
}

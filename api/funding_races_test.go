package api_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers/sim"
)

// Negative fundings (operator debits), Pix transfers and refund reserves
// race for one merchant's available balance (R23). Whatever the
// interleaving: no 5xx, the available balance never goes negative, and it
// ends at exactly what the accepted requests leave.
func TestNegativeFundingsRacingPayoutsAndRefundsNeverOverdraw_R23(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	// m1 has 1000.00 from setup; a paid charge adds its net.
	c := e.paidCard(t, "rl2-ch", "100.00")
	avail0, _ := e.balances("m1", e.m1)
	start := decimal.RequireFromString(avail0)

	const n = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	okAmount := decimal.Zero
	var fivexx []string
	record := func(r resp, err error, amt string) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			fivexx = append(fivexx, err.Error())
			return
		}
		if r.Status >= 500 {
			fivexx = append(fivexx, fmt.Sprintf("%d %s", r.Status, r.Body))
		}
		if r.Status == http.StatusCreated {
			okAmount = okAmount.Add(decimal.RequireFromString(amt))
		}
	}
	for i := range n {
		wg.Add(3)
		go func() {
			defer wg.Done()
			r, err := e.exchange(req{method: http.MethodPost, path: "/v1/merchants/m1/fundings", key: e.admin,
				body:   map[string]any{"amount": "-150.00", "currency": "BRL", "reason": "debit"},
				header: map[string]string{"Idempotency-Key": fmt.Sprintf("rl2-f-%d", i)}})
			record(r, err, "150.00")
		}()
		go func() {
			defer wg.Done()
			r, err := e.exchange(req{method: http.MethodPost, path: "/v1/merchants/m1/pix-transfers", key: e.m1,
				body: pixBody("150.00"), header: map[string]string{"Idempotency-Key": fmt.Sprintf("rl2-p-%d", i)}})
			record(r, err, "150.00")
		}()
		go func() {
			defer wg.Done()
			r, err := e.exchange(req{method: http.MethodPost, path: "/v1/merchants/m1/charges/" + c["id"].(string) + "/refunds",
				key: e.m1, body: map[string]any{"amount": "10.00", "currency": "BRL"},
				header: map[string]string{"Idempotency-Key": fmt.Sprintf("rl2-r-%d", i)}})
			record(r, err, "10.00")
		}()
	}
	wg.Wait()
	require.Empty(t, fivexx)
	acc, err := ledger.AccountByCode(e.ctx, e.pool, ledger.MerchantAvailable("m1", money.BRL).Code())
	require.NoError(t, err)
	require.False(t, acc.Balance.IsNegative())
	require.True(t, start.Sub(okAmount).Equal(acc.Balance), "start %s - accepted %s != available %s", start, okAmount, acc.Balance)
}

// Two fundings sent with two different Idempotency-Keys are two intents
// (R4), each posted as its own ledger transaction. A long key is hashed into
// the ledger key as "<key id>:sha256:<hex>", and merchants.ClientFundingKey
// also always hashes a key that begins with "sha256:", so no short key can
// spell the hashed form of a long one. Before, such a short key was used as
// is, landed on the long key's ledger key, and the second funding was
// answered 201 with the first one's transaction and never posted (found by
// review).
func TestFundingKeysOfTwoIntentsNeverCollide_R4(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	before, _ := e.balances("m1", e.m1)
	long := strings.Repeat("k", 240)
	sum := sha256.Sum256([]byte(long))
	short := "sha256:" + hex.EncodeToString(sum[:])
	body := map[string]any{"amount": "10.00", "currency": "BRL", "reason": "top-up"}
	r1 := e.post("/v1/merchants/m1/fundings", e.admin, long, body)
	require.Equal(t, http.StatusCreated, r1.Status, string(r1.Body))
	r2 := e.post("/v1/merchants/m1/fundings", e.admin, short, body)
	require.Equal(t, http.StatusCreated, r2.Status, string(r2.Body))
	after, _ := e.balances("m1", e.m1)
	require.NotEqual(t, r1.json(t)["id"], r2.json(t)["id"],
		"two Idempotency-Keys, two fundings, two transactions")
	require.Equal(t, decimal.RequireFromString(before).Add(decimal.NewFromInt(20)).StringFixed(2), after)
}

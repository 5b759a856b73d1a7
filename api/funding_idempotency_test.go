package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/providers/sim"
)

// R4/R6 and "every 5xx a client can trigger is a defect": a funding
// adjustment's ledger key is "funding:<merchant>:<key id>:<Idempotency-Key>"
// and lives for ever, while the API's idempotency record is deleted after
// its retention (24 h). An admin who reuses an Idempotency-Key after that
// with another amount gets ledger.ErrIdempotencyConflict: 422
// idempotency_key_reused (it was an unmapped 500), and nothing is posted.
func TestFundingKeyReusedAfterRetentionIs422(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	path := "/v1/merchants/m2/fundings"
	r := e.post(path, e.admin, "fund-reuse-1", map[string]any{"amount": "10.00", "currency": "BRL", "reason": "top up"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	// The hourly cleanup, once the record is past its retention.
	_, err := api.CleanupIdempotency(e.ctx, e.pool, time.Now().Add(time.Hour))
	require.NoError(t, err)
	before := e.countRows("ledger_transactions")
	out := e.post(path, e.admin, "fund-reuse-1", map[string]any{"amount": "20.00", "currency": "BRL", "reason": "top up"})
	require.Equal(t, http.StatusUnprocessableEntity, out.Status, string(out.Body))
	require.Equal(t, "idempotency_key_reused", out.code(t))
	require.Equal(t, before, e.countRows("ledger_transactions"), "nothing is posted")
}

// A funding's reason is bounded in characters, as the ledger's description
// is (length() in PostgreSQL): 1000 accented characters are accepted, 1001
// refused with 400 on reason (it counted bytes and refused 501).
func TestFundingReasonCountsCharacters(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	path := "/v1/merchants/m2/fundings"
	ok := e.post(path, e.admin, "fund-reason-1", map[string]any{"amount": "1.00", "currency": "BRL", "reason": strings.Repeat("ç", 1000)})
	require.Equal(t, http.StatusCreated, ok.Status, string(ok.Body))
	long := e.post(path, e.admin, "fund-reason-2", map[string]any{"amount": "1.00", "currency": "BRL", "reason": strings.Repeat("ç", 1001)})
	require.Equal(t, http.StatusBadRequest, long.Status, string(long.Body))
}

// R4 (the key is the intent) and "every 4xx names what is wrong": the API
// takes an Idempotency-Key of 1-255 printable ASCII characters, but the
// funding's ledger key "funding:<merchant>:<key id>:<Idempotency-Key>" can
// exceed the ledger's 255 characters; such a key was refused on fundings
// with a 400 that named no field. A long key now makes the ledger key
// "funding:<merchant>:<key id>:sha256:<hex>" (merchants.ClientFundingKey),
// which still answers a repeat, after the API's own record is gone too.
func TestFundingRefusesAValidLongIdempotencyKey(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	key := strings.Repeat("k", 250)
	r := e.post("/v1/merchants/m1/pix-transfers", e.m1, key, pixBody("1.00"))
	require.Equal(t, http.StatusCreated, r.Status, "the key is valid: %s", r.Body)
	body := map[string]any{"amount": "5.00", "currency": "BRL", "reason": "top-up"}
	r = e.post("/v1/merchants/m1/fundings", e.admin, key, body)
	require.Equal(t, http.StatusCreated, r.Status, "a valid Idempotency-Key refused on fundings: %s", r.Body)
	first := r.json(t)["id"]

	// A repeat once the API's record is past its retention: the ledger key
	// answers it, nothing is posted twice; another body is 422.
	_, err := api.CleanupIdempotency(e.ctx, e.pool, time.Now().Add(time.Hour))
	require.NoError(t, err)
	before := e.countRows("ledger_transactions")
	again := e.post("/v1/merchants/m1/fundings", e.admin, key, body)
	require.Equal(t, http.StatusCreated, again.Status, string(again.Body))
	require.Equal(t, first, again.json(t)["id"])
	other := e.post("/v1/merchants/m1/fundings", e.admin, key, map[string]any{"amount": "6.00", "currency": "BRL", "reason": "top-up"})
	require.Equal(t, http.StatusUnprocessableEntity, other.Status, string(other.Body))
	require.Equal(t, before, e.countRows("ledger_transactions"), "nothing is posted")
}

package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers/sim"
)

// Bad input gets a clear error: a payout (or a split leg) whose operation
// is documented but which no provider here takes (account_transfer in a
// deployment whose provider pays no connected account: the sim here, a
// Pix PSP in production) is refused naming the operation field and saying
// that no provider takes it. It was a 400 whose whole detail was the
// operation's name ("account_transfer") and which named no field: the
// provider's ErrUnsupported text was cut off by providerRefusal and the
// client could not tell what was wrong.
func TestReviewInputUnsupportedOperationIsAClearError(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	dest := map[string]any{"stripe_account": "acct_1Nv0FGQ9RKHgCVdK"}
	for _, c := range []struct {
		path, field string
		body        map[string]any
	}{
		{"/v1/merchants/m1/payouts", "operation", map[string]any{"operation": "account_transfer", "amount": "1.00",
			"currency": "BRL", "destination": dest}},
		{"/v1/merchants/m1/splits", "legs[0].operation", map[string]any{"currency": "BRL", "legs": []any{
			map[string]any{"operation": "account_transfer", "amount": "1.00", "destination": dest}}}},
	} {
		r := e.post(c.path, e.m1, "unsupported-"+c.path, c.body)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", c.path, r.Body)
		require.Equal(t, "validation_failed", r.code(t), c.path)
		require.Equal(t, c.field, r.field(t), "%s: the refusal names no field: %s", c.path, r.Body)
		detail, _ := r.json(t)["detail"].(string)
		require.Contains(t, detail, "account_transfer", c.path)
		require.True(t, strings.Contains(detail, "no provider") || strings.Contains(detail, "not supported"),
			"%s: the detail does not say why: %q", c.path, detail)
	}
	require.Zero(t, e.countRows("payouts"), "nothing was written")
}

// Every answer is what docs/openapi.yaml says (env.exchange checks it): the
// revoke and disable routes read no body, but with an Idempotency-Key the
// idempotency layer reads it (to hash it) and answers a body past the limit
// 413 body_too_large, which their documented responses did not list.
func TestReviewInputBodyTooLargeIsDocumentedOnBodilessRoutes(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	big := []byte(`{"x":"` + strings.Repeat("a", 2<<20) + `"}`)
	for _, c := range []struct{ path, key string }{
		{"/v1/keys/key_0000000000000000/revoke", e.admin},
		{"/v1/merchants/m1/notification-endpoints/we_00000000000000000000000000000000/disable", e.m1},
	} {
		r, err := e.exchange(req{method: http.MethodPost, path: c.path, key: c.key, body: big,
			header: map[string]string{"Idempotency-Key": "big-" + c.path}})
		require.Equal(t, http.StatusRequestEntityTooLarge, r.Status, "%s: %s", c.path, r.Body)
		require.NoError(t, err, c.path)
	}
}

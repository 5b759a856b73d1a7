package api_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers/sim"
)

// A merchant key never learns from a charge's split refusal which merchant
// ids exist (as TestHardeningSplitRecipientDoesNotRevealMerchants holds for
// the recipient error): recipients are checked after every other check, so
// a split that cannot fit the charge (a fixed amount above the net) is
// refused with the same code, field and detail whether its recipient exists
// or not, and nothing is written either way. Before, requireRecipient ran
// before Compute, so an unknown id was refused on splits[0].recipient_id
// and an existing one on splits[0].amount, and any merchant key could test
// ids for existence without creating anything (found by review).
func TestChargeSplitRefusalNeverRevealsWhichMerchantsExist(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	charge := func(recipient, idem string) resp {
		return e.post("/v1/merchants/m1/charges", e.m1, idem, map[string]any{"kind": "card", "amount": "10.00", "currency": "BRL",
			"card_token": "tok_visa", "splits": []any{map[string]any{"recipient_id": recipient, "amount": "999.00"}}})
	}
	unknown := charge("no-such-merchant", "or-1")
	existing := charge("m2", "or-2")
	require.Zero(t, e.countRows("charges"), "nothing was created either way")
	require.Equal(t, unknown.Status, existing.Status)
	u, x := unknown.json(t), existing.json(t)
	for _, k := range []string{"code", "field", "detail"} {
		require.Equal(t, u[k], x[k], "%s is the same for an unknown merchant id (%s) and an existing one (%s)", k, unknown.Body, existing.Body)
	}
}

package payouts_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/payouts"
)

// R22, R4: full (amount left out) and partial refunds of one charge racing, some
// under one shared client key: the refunds that exist never sum past the
// charge, and the shared key makes one refund.
func TestMixedFullAndPartialRefundsRace(t *testing.T) {
	t.Parallel()
	e, c := refundEnv(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	keyed := map[string]bool{}
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := payouts.RefundRequest{MerchantID: merchant, ChargeID: c.ID}
			switch i % 3 {
			case 0:
				req.Amount = brl("35.00")
			case 1:
				req.ClientKey = "shared-full"
			}
			p, err := e.svc.CreateRefund(e.ctx, req)
			var fe *payouts.FieldError
			if err != nil && !errors.Is(err, payouts.ErrRefundExceedsCharge) && !errors.As(err, &fe) {
				t.Errorf("unexpected: %v", err)
			}
			if err == nil && req.ClientKey != "" {
				mu.Lock()
				keyed[p.ID] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, len(keyed), 1, "one refund per client key")
	list, _, err := e.svc.List(e.ctx, payouts.ListParams{MerchantID: merchant, Kind: attempts.KindRefund})
	require.NoError(t, err)
	sum := decimal.Zero
	for _, p := range list {
		sum = sum.Add(p.Amount.Decimal())
		require.Equal(t, attempts.StatusSucceeded, e.execute(p).Status)
	}
	require.True(t, sum.LessThanOrEqual(c.Amount.Decimal()), "refunds sum to %s on a charge of %s", sum, c.Amount)
}

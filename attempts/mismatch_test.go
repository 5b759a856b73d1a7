package attempts

import (
	"context"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
)

// amountOwner is ownerRecorder that knows its attempts move 10.50 BRL (what
// harness.open opens).
type amountOwner struct{ *ownerRecorder }

func (amountOwner) AttemptAmount(context.Context, DB, Attempt) (decimal.Decimal, string, error) {
	return decimal.RequireFromString("10.50"), "BRL", nil
}

var _ AmountOwner = amountOwner{}

func setupAmountOwner(t *testing.T) *harness {
	h := setup(t, harnessOpts{})
	for _, k := range Kinds {
		h.svc.RegisterOwner(k, amountOwner{h.owner})
	}
	return h
}

// Issue 13 finding 4 (R14, R17). A lookup that finds the operation with
// another amount than the attempt's moves nothing: the attempt stays
// unknown, goes to review with an alert (error log, review and mismatch
// metrics), and the owner is never told.
func TestLookupAmountMismatchGoesToReview_R14_R17(t *testing.T) {
	t.Parallel()
	h := setupAmountOwner(t)
	a := unknownAttempt(t, h)
	h.psp.mu.Lock()
	h.psp.ops[a.Reference].Amount = "99.00"
	h.psp.mu.Unlock()
	h.clock.Advance(time.Minute)
	r, err := h.svc.Resolve(h.ctx, a.ID)
	require.NoError(t, err)
	require.False(t, r.Transitioned)
	got := h.get(a.ID)
	require.Equal(t, StatusUnknown, got.Status)
	require.True(t, got.Review)
	require.Contains(t, got.ReviewReason, "amount")
	require.Zero(t, h.owner.count(a.ID))
	require.Equal(t, float64(1), testCounter(h.metrics.Mismatches))
	require.EqualValues(t, 1, h.reviews.Load())
	h.requireNoViolations()

	// The same lookup with the right amount resolves it (a human cleared
	// nothing: the review flag stays, the provider's word still counts).
	b := unknownAttempt(t, h)
	h.clock.Advance(time.Minute)
	r, err = h.svc.Resolve(h.ctx, b.ID)
	require.NoError(t, err)
	require.Equal(t, StatusSucceeded, r.Attempt.Status)
	require.Equal(t, 1, h.owner.count(b.ID))
}

// Issue 13 finding 4 (R17). A provider's statement by reference
// (webhook, poll) moves an attempt only when its provider, operation,
// amount and currency match the attempt's: any mismatch is
// ErrReportMismatch, a review flag and no transition.
func TestReportByReferenceMustMatch_R17(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		tweak func(*ResolveInput)
	}{
		{"provider", func(in *ResolveInput) { in.Provider = "other_psp" }},
		{"operation", func(in *ResolveInput) { in.Operation = providers.OpBankPayout }},
		// A report that names no operation but its direction (a Pix
		// notice of money received, of a send) must move money the
		// attempt's way (R17).
		{"direction", func(in *ResolveInput) { in.Operation, in.Direction = "", providers.DirectionIn }},
		{"amount", func(in *ResolveInput) { in.Amount = "10.51" }},
		{"amount_unreadable", func(in *ResolveInput) { in.Amount = "ten" }},
		{"currency", func(in *ResolveInput) { in.Currency = "USD" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := setupAmountOwner(t)
			a := unknownAttempt(t, h)
			in := ResolveInput{Reference: a.Reference, Provider: "fake", Operation: providers.OpPixTransfer,
				Amount: "10.5", Currency: "BRL", State: providers.StateSucceeded, Source: SourceWebhook, Actor: "evt_1"}
			tc.tweak(&in)
			r, err := h.svc.ResolveByReference(h.ctx, in)
			require.ErrorIs(t, err, ErrReportMismatch)
			require.False(t, r.Transitioned)
			got := h.get(a.ID)
			require.Equal(t, StatusUnknown, got.Status)
			require.True(t, got.Review)
			require.Zero(t, h.owner.count(a.ID), "no ledger move")
			require.Equal(t, float64(1), testCounter(h.metrics.Mismatches))
			// A late success report on an attempt resolved failed is a
			// divergence whatever amount, currency or operation it names
			// (its provider says money left under our reference after the
			// reserve was released: R19, R22), and still a mismatch that
			// moves nothing; another provider's report is neither.
			b := unknownAttempt(t, h)
			h.clock.Advance(3 * time.Minute)
			h.psp.mu.Lock()
			delete(h.psp.ops, b.Reference)
			h.psp.mu.Unlock()
			_, err = h.svc.Resolve(h.ctx, b.ID)
			require.NoError(t, err)
			require.Equal(t, StatusFailed, h.get(b.ID).Status)
			in.Reference = b.Reference
			finals := h.owner.count(b.ID) // its failure, told once
			_, err = h.svc.ResolveByReference(h.ctx, in)
			require.ErrorIs(t, err, ErrReportMismatch)
			got = h.get(b.ID)
			require.Equal(t, StatusFailed, got.Status, "final status kept (R9)")
			if tc.name == "provider" {
				require.Nil(t, got.DivergedAt)
			} else {
				require.NotNil(t, got.DivergedAt)
				require.True(t, got.Review)
			}
			require.Equal(t, finals, h.owner.count(b.ID), "the owner is told nothing more: no ledger move")
			vs, err := Verify(h.ctx, h.pool)
			require.NoError(t, err)
			if tc.name == "provider" {
				require.Empty(t, vs)
			} else {
				require.Len(t, vs, 1)
				require.Equal(t, "diverged", vs[0].Code, "audit verify reports it until a human settles it")
			}
		})
	}
	// Everything matching (amounts compared as numbers): it resolves.
	h := setupAmountOwner(t)
	a := unknownAttempt(t, h)
	r, err := h.svc.ResolveByReference(h.ctx, ResolveInput{Reference: a.Reference, Provider: "fake",
		Operation: providers.OpPixTransfer, Amount: "10.5", Currency: "BRL", State: providers.StateSucceeded,
		Source: SourceWebhook, Actor: "evt_ok"})
	require.NoError(t, err)
	require.True(t, r.Transitioned)
	require.Equal(t, 1, h.owner.count(a.ID))
	h.requireNoViolations()
}

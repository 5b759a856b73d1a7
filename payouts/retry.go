package payouts

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/ledger"
)

// CauseReserveCarry is the ledger cause of a reserve handed from a payout's
// failed attempt to its next attempt (RetryPolicy): a transfer from the
// merchant's reserved account to itself, caused by the failed attempt and
// naming the next one in its metadata (to_attempt_id). The money never
// passes through available, so the merchant's available balance never
// flickers and the money is never free while the payout goes on (R22).
const CauseReserveCarry = "payout_reserve_carry"

// RetryPolicy opens a payout's next attempt by itself when an attempt
// resolves failed for a transient reason: the provider proved it did
// nothing (a lookup past the consistency window found no operation after a
// 5xx or a timeout), or the provider's own "try again" codes
// (providers.Capabilities.TransientFailures). The next attempt has a NEW
// key and reference (R6), is opened in the same transaction that records
// the failure, and takes over the reserve (CauseReserveCarry). A definitive
// failure (declined, invalid key or account, refused) never retries, nor
// does an operator's "failed", and an attempt that is unknown, pending or
// processing never gets a successor: only one proven failed does. When the
// policy gives up (MaxAttempts, Within), the payout fails and the reserve
// is released then. Refunds are not retried (a refund stays with its
// charge's provider; the merchant retries it).
//
// The next attempt waits Backoff before its first call. If the provider
// then reports the failed attempt succeeded after all (a divergence, R9,
// R19), the next attempt is never sent: the divergence's transaction puts
// it in review (attempts lateConflict), and the attempts core refuses to
// mark a call of an attempt in review or of a subject with an unsettled
// divergence (sendableSQL, Execute). It stays open with the carried
// reserve (R22) until an operator decides.
//
// The zero RetryPolicy never retries.
type RetryPolicy struct {
	// MaxAttempts per payout, the first included (0 or 1: no retries).
	MaxAttempts int
	// Within bounds the retries: no attempt is opened once this long has
	// passed since the payout was created (0: no bound).
	Within time.Duration
	// Backoff before the first call of the second attempt; it doubles for
	// each later attempt, up to 32 times Backoff.
	Backoff time.Duration
}

// next reports whether p, whose current attempt a just failed at now, gets
// another attempt, and when that attempt may first call.
func (s *Service) next(p Payout, a attempts.Attempt, now time.Time) (time.Time, bool) {
	r := s.retry
	switch {
	case r.MaxAttempts <= 1 || p.AttemptCount >= r.MaxAttempts:
		return time.Time{}, false
	case p.Kind == attempts.KindRefund:
		return time.Time{}, false
	case r.Within > 0 && !now.Before(p.CreatedAt.Add(r.Within)):
		return time.Time{}, false
	case !s.transient(a):
		return time.Time{}, false
	}
	wait := r.Backoff << min(max(p.AttemptCount-1, 0), 5)
	return now.Add(wait), true
}

// transient reports whether a's failure says the provider did nothing and
// a new attempt may succeed: the resolver's proof of absence (not found
// past the consistency window, R16), or a code the provider declares
// transient.
func (s *Service) transient(a attempts.Attempt) bool {
	if a.Status != attempts.StatusFailed {
		return false
	}
	if a.ResolvedBy == string(attempts.ActorResolver) && a.FailureCode == attempts.FailureNotFound {
		return true
	}
	prov, ok := s.attempts.Provider(a.Provider)
	return ok && a.FailureCode != "" && slices.Contains(prov.Capabilities().TransientFailures, a.FailureCode)
}

// openNext opens p's next attempt in tx (p's current attempt failed is
// failed, p was just marked failed by the same transaction), points p at
// it, and returns the carry of the reserve from failed to the new attempt.
// The next attempt goes to the provider after failed's in the operation's
// failover order that pays the payout's kind of destination
// (providers.Routes.Next: a Stripe bank account never fails over to a Pix
// PSP), else to the same provider; if neither accepts the operation (ok
// false), there is no next attempt and the caller releases the reserve as
// for any failure.
func (s *Service) openNext(ctx context.Context, tx pgx.Tx, p Payout, failed attempts.Attempt, sendAfter time.Time) (
	np Payout, carry ledger.TransactionInput, ok bool, err error) {
	var na attempts.Attempt
	candidates := slices.Compact([]string{s.routes.Next(p.Operation, failed.Provider, p.Destination.Kind(), s.attempts.Provider),
		failed.Provider})
	for _, provider := range candidates {
		na, err = s.attempts.Open(ctx, tx, attempts.OpenParams{Kind: p.Kind, SubjectID: p.ID, Provider: provider,
			Input: operationInput(&p), SendAfter: sendAfter})
		if !errors.Is(err, attempts.ErrInvalid) {
			break
		}
		s.log.WarnContext(ctx, "payouts: a provider refused a payout's next attempt", "payout_id", p.ID,
			"provider", provider, "error", err)
	}
	if errors.Is(err, attempts.ErrInvalid) {
		return p, ledger.TransactionInput{}, false, nil
	}
	if err != nil {
		return p, ledger.TransactionInput{}, false, fmt.Errorf("payouts: next attempt of %s: %w", p.ID, err)
	}
	np, err = scanPayout(tx.QueryRow(ctx, `UPDATE payouts SET status = 'processing', failure_code = NULL,
		failure_reason = NULL, current_attempt_id = $2, attempt_count = attempt_count + 1, updated_at = $3
		WHERE id = $1 AND current_attempt_id = $4 RETURNING `+payoutColumns, p.ID, na.ID, s.clock.Now(), failed.ID))
	if err != nil {
		return p, ledger.TransactionInput{}, false, fmt.Errorf("payouts: point %s at its next attempt: %w", p.ID, err)
	}
	reserved := ledger.MerchantReserved(p.MerchantID, p.Amount.Currency())
	carry, err = s.moveInput(ctx, tx, p, failed.ID, CauseReserveCarry, reserved, reserved)
	if err != nil {
		return p, ledger.TransactionInput{}, false, err
	}
	carry.Description = fmt.Sprintf("reserve of %s %s carried from attempt %s to attempt %s", p.Kind, p.ID, failed.ID, na.ID)
	carry.Metadata["to_attempt_id"] = na.ID.String()
	s.log.InfoContext(ctx, "payout attempt failed transiently; next attempt opened with the reserve held",
		"payout_id", p.ID, "attempt_id", failed.ID, "next_attempt_id", na.ID, "reference", failed.Reference,
		"next_reference", na.Reference, "provider", failed.Provider, "next_provider", na.Provider,
		"failure_code", failed.FailureCode, "attempt", np.AttemptCount, "send_after", sendAfter)
	return np, carry, true, nil
}

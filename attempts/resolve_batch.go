package attempts

import (
	"bytes"
	"context"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/saldo/saldo/internal/groupcommit"
)

// The resolver's lookups are recorded in batches, as Execute's call
// results are (recordMany): the resolver jobs that looked up at the same
// time share one transaction, and the ledger effects of the attempts it
// makes final (a reserve settled or released) are posted together, last,
// with one PostMany. One transaction per lookup posted each settle or
// release alone on its merchant's balance row and committed on its own;
// under provider faults those single-transfer transactions doubled the
// ledger's calls and queued on the rows the record batches were writing
// (docs/performance.md).

// resolveMany applies a batch of lookups: the attempts named once together
// in one transaction (resolveBatch), an attempt named twice (two resolvers
// at once) and a lone lookup in a transaction each. If the shared
// transaction fails, its lookups are applied one by one, each only if the
// batch did not commit it after all.
func (s *Service) resolveMany(ctx context.Context, lus []lookedUp) []groupcommit.Result[ResolveResult] {
	out := make([]groupcommit.Result[ResolveResult], len(lus))
	together, alone := splitLookups(lus, make(map[uuid.UUID]bool, len(lus)))
	var batchAt *time.Time
	if len(together) > 1 {
		// In attempt id order: the batch locks its attempts one by one, in
		// the order record batches lock theirs.
		slices.SortFunc(together, func(i, j int) int { return bytes.Compare(lus[i].a.ID[:], lus[j].a.ID[:]) })
		batch := make([]lookedUp, len(together))
		for k, i := range together {
			batch[k] = lus[i]
		}
		now := s.lookupNow()
		res, err := s.resolveBatch(ctx, batch, now)
		if err == nil {
			for k, i := range together {
				out[i].Value = s.retryIn(res[k])
			}
			together = nil
		} else {
			s.lookupFallback()
			s.log.ErrorContext(ctx, "attempts: recording a batch of lookups failed; recording them one by one, each only if it did not commit",
				"batch", len(batch), "error", err)
			batchAt = &now
		}
	}
	one := func(i int, batchAt *time.Time) {
		res, err := s.resolveOne(ctx, lus[i], batchAt)
		out[i] = groupcommit.Result[ResolveResult]{Value: s.retryIn(res), Err: err}
	}
	for _, i := range together {
		one(i, batchAt)
	}
	// A second lookup of an attempt was never in the batch: it is recorded
	// as its own, whatever the batch did.
	for _, i := range alone {
		one(i, nil)
	}
	return out
}

// splitLookups gives the lookups of lus applied together, one per attempt
// not in seen, and the others, applied alone (a second resolver of the same
// attempt); the attempts put together are added to seen.
func splitLookups(lus []lookedUp, seen map[uuid.UUID]bool) (together, alone []int) {
	for i, lu := range lus {
		if !seen[lu.a.ID] {
			seen[lu.a.ID] = true
			together = append(together, i)
			continue
		}
		alone = append(alone, i)
	}
	return together, alone
}

// lookupNow is the time a lookup is recorded at, to the microsecond
// PostgreSQL keeps: resolveOne recognises a batch's lookup by it, and the
// next lookup is scheduled from it. It is not when the provider was asked:
// a "not found" is judged at lookedUp.asked, taken before the lookup was
// sent (notFoundFailure, R16), however long the answer and its batch took.
func (s *Service) lookupNow() time.Time {
	return s.clock.Now().Truncate(time.Microsecond)
}

// resolveBatch applies lookups of distinct attempts in one transaction:
// their records and transitions as applyLookups makes them, then the
// attempts made final go to their owners together and their ledger
// effects are posted in one PostMany, the transaction's last statements
// (inTxFinals).
func (s *Service) resolveBatch(ctx context.Context, lus []lookedUp, now time.Time) ([]ResolveResult, error) {
	var out []ResolveResult
	err := s.inTxFinals(ctx, func(tx pgx.Tx, after *afterCommit) error {
		var err error
		out, err = s.applyLookups(ctx, tx, after, lus, now)
		return err
	})
	return out, err
}

// resolveOne applies one lookup in its own transaction. batchAt, when set,
// is the time a failed batch recorded lookups at: the error may have been
// a lost COMMIT answer (docs/pitfalls.md), so an attempt whose last lookup
// bears that time already has this lookup recorded and applied, and is
// answered as it stands, not recorded twice. The check locks the attempt:
// a batch whose COMMIT is still under way holds it until it ends.
func (s *Service) resolveOne(ctx context.Context, lu lookedUp, batchAt *time.Time) (ResolveResult, error) {
	var res ResolveResult
	err := s.inTxFinals(ctx, func(tx pgx.Tx, after *afterCommit) error {
		if batchAt != nil {
			la, err := lockAttempt(ctx, tx, lu.a.ID)
			if err != nil {
				return err
			}
			if la.LastLookupAt != nil && la.LastLookupAt.Equal(*batchAt) {
				res = ResolveResult{Attempt: la}
				s.log.WarnContext(ctx, "attempts: a lookup batch answered an error but committed; its lookup is not recorded again",
					"attempt_id", la.ID, "kind", la.Kind, "provider", la.Provider, "reference", la.Reference, "status", la.Status)
				return nil
			}
		}
		rs, err := s.applyLookups(ctx, tx, after, []lookedUp{lu}, s.lookupNow())
		if err != nil {
			return err
		}
		res = rs[0]
		return nil
	})
	return res, err
}

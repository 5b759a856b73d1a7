package payouts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/internal/groupcommit"
	"github.com/saldo/saldo/internal/intent"
	"github.com/saldo/saldo/internal/pgplan"
	"github.com/saldo/saldo/internal/sqlcols"
	"github.com/saldo/saldo/ledger"
)

// Group commit of payouts (docs/decisions/0002-batching-whole-operations.md).
// CreatePayout calls made at the same time share one opening transaction
// (createBatch), and the attempts core hands the final attempts of calls
// recorded together to AttemptsFinal at once. Each answer is the one the
// one-at-a-time path gives; anything unusual (a client key used before, an
// insufficient balance, any error) sends the batch's requests down that
// path, one transaction each.
//
// A batch whose COMMIT was sent but not answered (a cut connection) may
// have committed (docs/pitfalls.md): so each request's payout id is made once,
// before its first try, and every try uses it. A try after such an error
// first looks for that payout (and any error is followed by a look too):
// what committed is answered, never created again (issue 13, R22).

// CreateStats is how CreatePayout calls were batched.
func (s *Service) CreateStats() groupcommit.Stats { return s.creator.Stats() }

// createReq is one validated CreatePayout.
type createReq struct {
	req  PayoutRequest
	hash []byte
	// id is the payout's id, made before the first try and kept by every
	// try, so that a try after an ambiguous commit finds what committed.
	id string
	// provider the payout goes to (its operation's route).
	provider string
}

// createMany creates a batch of payouts: together in one transaction when
// it can, else one by one. A reserve the ledger refuses (insufficient
// balance) takes only its own request out of the batch: the rest is tried
// again together (at most twice), and the refused request goes one by one
// after it, so its answer comes from a transaction of its own.
func (s *Service) createMany(ctx context.Context, reqs []createReq) []groupcommit.Result[Payout] {
	for i := range reqs {
		if reqs[i].id == "" {
			reqs[i].id = newPayoutID()
		}
	}
	out := make([]groupcommit.Result[Payout], len(reqs))
	// redo: the batch failed in a way that may have committed it.
	redo := false
	together := make([]int, len(reqs))
	for i := range together {
		together[i] = i
	}
	var alone []int
	for try := 0; len(together) > 1 && try < 3; try++ {
		batch := make([]createReq, len(together))
		for k, i := range together {
			batch[k] = reqs[i]
		}
		created, err := s.createBatch(ctx, batch)
		if err == nil {
			for k, i := range together {
				if created[k].ID != "" {
					out[i].Value = created[k]
					continue
				}
				// Its client key was claimed before: the one-by-one path
				// returns the payout it made, or the conflict.
				alone = append(alone, i)
			}
			together = nil
			break
		}
		s.creator.Fallback()
		var refused *refusedReserve
		if !errors.As(err, &refused) {
			// Maybe committed (a lost COMMIT answer): the one-by-one tries
			// look for each payout first.
			redo = true
			s.log.WarnContext(ctx, "payouts: creating a batch of payouts failed; creating them one by one, each only if it did not commit",
				"batch", len(batch), "error", err)
			break
		}
		alone = append(alone, together[refused.index])
		together = slices.Delete(together, refused.index, refused.index+1)
	}
	alone = append(alone, together...)
	slices.Sort(alone)
	for _, i := range alone {
		out[i].Value, out[i].Err = s.createOne(ctx, reqs[i], redo)
	}
	return out
}

// refusedReserve is createBatch's error when the ledger refused the reserve
// of request index of the batch.
type refusedReserve struct {
	index int
	err   error
}

func (e *refusedReserve) Error() string {
	return fmt.Sprintf("payouts: reserve of request %d of a batch refused: %v", e.index, e.err)
}

func (e *refusedReserve) Unwrap() error { return e.err }

// createOne is CreatePayout's one-at-a-time transaction. With redo (an
// earlier try may have committed) it first looks for the payout r.id; after
// any error it looks again, since the error may be a lost COMMIT answer (or
// a unique key hit by a try racing the commit of an earlier one): a payout
// that exists is the answer.
func (s *Service) createOne(ctx context.Context, r createReq, redo bool) (Payout, error) {
	req := r.req
	if redo {
		if p, ok := s.committed(ctx, r); ok {
			return p, nil
		}
	}
	var out Payout
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		p := newPayout(req, r.provider, r.id)
		existing, err := s.claimClientKey(ctx, tx, req.MerchantID, req.ClientKey, r.hash, "payout", p.ID)
		if err != nil || existing != "" {
			if err == nil {
				out, err = s.get(ctx, tx, req.MerchantID, existing)
			}
			return err
		}
		if err := s.insertWithAttempt(ctx, tx, &p, operationInput(&p)); err != nil {
			return err
		}
		out = p
		return nil
	})
	if err != nil {
		if p, ok := s.committed(ctx, r); ok {
			s.log.WarnContext(ctx, "payouts: creating a payout answered an error but it committed; answering the payout",
				"payout_id", p.ID, "error", err)
			return p, nil
		}
	}
	return out, err
}

// committed looks for the payout r.id outside any transaction: whether a
// try whose answer was an error committed after all. A failed look is "not
// known to exist" (ok false), and the caller keeps its error.
func (s *Service) committed(ctx context.Context, r createReq) (Payout, bool) {
	p, err := s.get(context.WithoutCancel(ctx), s.pool, r.req.MerchantID, r.id)
	return p, err == nil
}

// committedAfterError looks, after the transaction that would have made
// payout id failed with err (which may be a lost COMMIT answer, or the
// caller's context ending during it), for that payout: when it committed,
// it is the answer (logged), never an error that would make a caller
// without a client key ask again and pay twice (issue 13, R22).
func (s *Service) committedAfterError(ctx context.Context, merchantID, id string, err error) (Payout, bool) {
	p, gerr := s.get(context.WithoutCancel(ctx), s.pool, merchantID, id)
	if gerr != nil {
		return Payout{}, false
	}
	s.log.WarnContext(ctx, "payouts: a transaction answered an error but committed; answering what it made",
		"payout_id", id, "kind", p.Kind, "error", err)
	return p, true
}

func newPayoutID() string { return intent.NewID("po_") }

func newPayout(req PayoutRequest, provider, id string) Payout {
	return Payout{
		ID: id, MerchantID: req.MerchantID, Kind: req.kind(), Operation: req.Operation,
		Provider: provider, Amount: req.Amount, Destination: req.Destination, Description: req.Description,
		Metadata: req.Metadata, Status: StatusProcessing,
	}
}

// createBatch opens every payout of reqs in one transaction: one statement
// claims the client keys, attempts.OpenNew opens the attempts (and enqueues
// their submit jobs), one statement inserts the payouts and one
// ledger.PostMany posts every reserve (R22). A request whose client key was
// claimed before is left out (its Payout has no ID). Any error rolls the
// whole batch back.
func (s *Service) createBatch(ctx context.Context, reqs []createReq) ([]Payout, error) {
	var out []Payout
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		now := s.clock.Now()
		out = make([]Payout, len(reqs))
		ps := make([]Payout, len(reqs))
		for i, r := range reqs {
			ps[i] = newPayout(r.req, r.provider, r.id)
		}
		fresh, err := s.claimClientKeys(ctx, tx, reqs, ps, now)
		if err != nil {
			return err
		}
		if len(fresh) == 0 {
			return nil
		}
		params := make([]attempts.OpenParams, len(fresh))
		for k, i := range fresh {
			p := &ps[i]
			params[k] = attempts.OpenParams{Kind: p.Kind, SubjectID: p.ID, Provider: p.Provider, Input: operationInput(p)}
		}
		as, err := s.attempts.OpenNew(ctx, tx, params)
		if errors.Is(err, attempts.ErrInvalid) {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if err != nil {
			return err
		}
		ins := make([]ledger.TransactionInput, len(fresh))
		for k, i := range fresh {
			p := &ps[i]
			p.CurrentAttemptID, p.AttemptCount = &as[k].ID, 1
			p.CreatedAt, p.UpdatedAt = now, now
			from, to := reserveSpecs(*p)
			if ins[k], err = s.moveInput(ctx, tx, *p, as[k].ID, CauseReserve, from, to); err != nil {
				return err
			}
		}
		if err := s.insertPayouts(ctx, tx, ps, fresh, now); err != nil {
			return err
		}
		// The reserves last: they lock the merchants' balance rows, which
		// should be held for as short a time as possible before COMMIT.
		if _, err := ledger.PostMany(ctx, tx, ins); err != nil {
			var be *ledger.BatchError
			var insufficient *ledger.InsufficientFundsError
			if errors.As(err, &be) && errors.As(be.Err, &insufficient) {
				return &refusedReserve{index: fresh[be.Index], err: reserveError(ps[fresh[be.Index]], CauseReserve, be.Err)}
			}
			return err
		}
		for _, i := range fresh {
			out[i] = ps[i]
		}
		return nil
	})
	return out, err
}

// claimClientKeys records the client keys of a batch in one statement and
// returns the indexes of the requests to create: those without a key and
// those whose key nobody claimed before (nor earlier in the batch).
func (s *Service) claimClientKeys(ctx context.Context, tx pgx.Tx, reqs []createReq, ps []Payout, now time.Time) ([]int, error) {
	var merchants, keys, ids []string
	var hashes [][]byte
	var keyed []int
	var fresh []int
	for i, r := range reqs {
		if r.req.ClientKey == "" {
			fresh = append(fresh, i)
			continue
		}
		keyed = append(keyed, i)
		merchants = append(merchants, r.req.MerchantID)
		keys = append(keys, r.req.ClientKey)
		hashes = append(hashes, r.hash)
		ids = append(ids, ps[i].ID)
	}
	if len(keyed) == 0 {
		return fresh, nil
	}
	rows, err := tx.Query(ctx, `INSERT INTO payout_requests (merchant_id, client_key, request_hash, object_kind, object_id, created_at)
		SELECT merchant_id, client_key, request_hash, 'payout', object_id, $5
		FROM unnest($1::text[], $2::text[], $3::bytea[], $4::text[]) AS u(merchant_id, client_key, request_hash, object_id)
		ON CONFLICT DO NOTHING RETURNING object_id`, merchants, keys, hashes, ids, now)
	if err != nil {
		return nil, err
	}
	claimed := map[string]bool{}
	var id string
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { claimed[id] = true; return nil }); err != nil {
		return nil, err
	}
	for _, i := range keyed {
		if claimed[ps[i].ID] {
			fresh = append(fresh, i)
		}
	}
	slices.Sort(fresh)
	return fresh, nil
}

// insertPayouts inserts ps[fresh...] in one statement.
func (s *Service) insertPayouts(ctx context.Context, tx pgx.Tx, ps []Payout, fresh []int, now time.Time) error {
	n := len(fresh)
	ids, merchants, kinds, ops, provs, amounts, currencies := make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	dests, descs, metas := make([]*string, n), make([]*string, n), make([]string, n)
	attemptIDs := make([]uuid.UUID, n)
	for k, i := range fresh {
		p := ps[i]
		ids[k], merchants[k], kinds[k], ops[k], provs[k] = p.ID, p.MerchantID, string(p.Kind), string(p.Operation), p.Provider
		amounts[k], currencies[k] = p.Amount.Decimal().String(), p.Amount.Currency().Code()
		if p.Destination != nil {
			d, err := json.Marshal(p.Destination)
			if err != nil {
				return err
			}
			dests[k] = new(string(d))
		}
		meta, err := json.Marshal(sqlcols.OrEmpty(p.Metadata))
		if err != nil {
			return err
		}
		descs[k], metas[k], attemptIDs[k] = sqlcols.Nullable(p.Description), string(meta), *p.CurrentAttemptID
	}
	_, err := tx.Exec(ctx, `INSERT INTO payouts (id, merchant_id, kind, operation, provider, amount, currency,
			destination, description, metadata, status, current_attempt_id, attempt_count, created_at, updated_at)
		SELECT id, merchant_id, kind, operation, provider, amount::numeric, currency, destination::jsonb, description,
			metadata::jsonb, 'processing', current_attempt_id, 1, $12, $12
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
			$9::text[], $10::text[], $11::uuid[])
			AS u(id, merchant_id, kind, operation, provider, amount, currency, destination, description, metadata,
				current_attempt_id)`,
		ids, merchants, kinds, ops, provs, amounts, currencies, dests, descs, metas, attemptIDs, now)
	return err
}

// AttemptsFinal is AttemptFinal for the final attempts of calls recorded
// together (attempts.BatchOwner), inside their transaction: one statement
// moves the payouts (attemptsFinalSQL; no other batch holds them, since each
// has one open attempt), the OnFinalMany hook runs once (or OnFinal for
// each), and every settle and release is added to postings, which the
// attempts core posts with every other owner's (one lock order for all the
// accounts of the record batch).
func (s *Service) AttemptsFinal(ctx context.Context, tx pgx.Tx, as []attempts.Attempt, postings *ledger.Deferred) error {
	ids := make([]string, len(as))
	for i, a := range as {
		if a.Status != attempts.StatusSucceeded && a.Status != attempts.StatusFailed {
			return fmt.Errorf("payouts: AttemptsFinal called with status %s", a.Status)
		}
		ids[i] = a.SubjectID
	}
	slices.Sort(ids)
	if len(slices.Compact(ids)) != len(as) {
		// Two final attempts of one payout in one record batch cannot
		// happen (a payout has one open attempt at a time, and a recorded
		// attempt that was already final does not move). Refusing rolls the
		// batch back; its calls are then recorded one by one.
		return fmt.Errorf("payouts: AttemptsFinal handed two final attempts of one payout")
	}
	n := len(as)
	pids, to := make([]string, n), make([]string, n)
	aids := make([]string, n)
	codes, reasons := make([]*string, n), make([]*string, n)
	for i, a := range as {
		pids[i], aids[i], to[i] = a.SubjectID, a.ID.String(), string(a.Status)
		if a.Status == attempts.StatusFailed {
			codes[i], reasons[i] = sqlcols.Nullable(a.FailureCode), sqlcols.Nullable(a.FailureReason)
		}
	}
	rows, err := tx.Query(ctx, attemptsFinalSQL, pgplan.PerCall, pids, aids, to, codes, reasons, s.clock.Now())
	if err != nil {
		return err
	}
	final := make(map[string]Payout, n)
	for rows.Next() {
		var moved bool
		p, err := scanPayoutAfter(rows, &moved)
		if err != nil {
			rows.Close()
			return err
		}
		final[p.ID] = p
	}
	if err := rows.Err(); err != nil {
		return err
	}
	ins := make([]ledger.TransactionInput, n)
	// goesOn: the payout got a next attempt (RetryPolicy), so it is not
	// final and no final hook runs for it.
	goesOn := make([]bool, n)
	now := s.clock.Now()
	for i, a := range as {
		p, ok := final[a.SubjectID]
		if !ok {
			return fmt.Errorf("payouts: attempt %s names payout %s: %w", a.ID, a.SubjectID, ErrNotFound)
		}
		if p.Status == StatusFailed && p.CurrentAttemptID != nil && *p.CurrentAttemptID == a.ID {
			sendAfter, ok := s.next(p, a, now)
			if ok {
				// Like Retry: no new key once an attempt of the payout
				// is known to have paid (a divergence, settled or not).
				diverged, err := anyDiverged(ctx, tx, p.ID)
				if err != nil {
					return err
				}
				ok = !diverged
			}
			if ok {
				np, carry, opened, err := s.openNext(ctx, tx, p, a, sendAfter)
				if err != nil {
					return err
				}
				if opened {
					final[a.SubjectID], ins[i], goesOn[i] = np, carry, true
					continue
				}
			}
		}
		if s.onFinal != nil && s.onFinals == nil {
			if err := s.onFinal(ctx, tx, p); err != nil {
				return err
			}
		}
		cause, from, to := finalMove(p, a)
		if ins[i], err = s.moveInput(ctx, tx, p, a.ID, cause, from, to); err != nil {
			return err
		}
	}
	if s.onFinals != nil {
		var ps []Payout
		for i, a := range as {
			if !goesOn[i] {
				ps = append(ps, final[a.SubjectID])
			}
		}
		if len(ps) > 0 {
			if err := s.onFinals(ctx, tx, ps); err != nil {
				return err
			}
		}
	}
	postings.Add(ins, nil, func([]ledger.Transaction) error {
		for _, a := range as {
			s.log.InfoContext(ctx, "payout attempt final", "payout_id", a.SubjectID, "attempt_id", a.ID,
				"reference", a.Reference, "provider", a.Provider, "status", a.Status)
		}
		return nil
	})
	// A release frees a reserve an open divergence may want held (R9, R22).
	return s.topUpHolds(ctx, tx, as, ins, final, postings)
}

// attemptsFinalSQL moves the payouts of a batch of final attempts: to
// succeeded for a succeeded attempt, to failed for a failed attempt that
// is the payout's current one; any other payout row stays as it is (moved
// false). current_attempt_id is the row's latest version (the UPDATE waits
// for a concurrent writer and re-reads it), and no statement changes it
// while an attempt of the payout is open.
var attemptsFinalSQL = `UPDATE payouts p SET
		status = CASE WHEN ` + payoutMovesSQL + ` THEN u.to_status ELSE p.status END,
		failure_code = CASE WHEN ` + payoutMovesSQL + ` THEN u.code ELSE p.failure_code END,
		failure_reason = CASE WHEN ` + payoutMovesSQL + ` THEN u.reason ELSE p.failure_reason END,
		updated_at = CASE WHEN ` + payoutMovesSQL + ` THEN $6 ELSE p.updated_at END
	FROM unnest($1::text[], $2::uuid[], $3::text[], $4::text[], $5::text[]) AS u(pid, attempt_id, to_status, code, reason)
	WHERE p.id = ANY ($1::text[]) AND p.id = u.pid
	RETURNING ` + payoutMovesSQL + `, ` + sqlcols.Qualify("p", payoutColumns)

// payoutMovesSQL: the payout row moves to u.to_status.
const payoutMovesSQL = `(u.to_status = 'succeeded' OR p.current_attempt_id = u.attempt_id)`

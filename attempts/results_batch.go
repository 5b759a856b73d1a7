package attempts

import (
	"bytes"
	"context"
	"slices"
	"sync/atomic"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/saldo/saldo/internal/groupcommit"
)

// Calls' results (Execute's phase 3) and lookups' answers (Resolve) are
// recorded by one group-commit batcher (attempts_results): a batch holding
// both records the calls and applies the lookups in one transaction, whose
// last statement posts the ledger effects of every attempt either made
// final, with one PostMany. Recorded apart, the two kinds of batch each
// took the merchants' balance rows for their own ledger statement and
// commit: under provider faults about as many lookup transactions as
// record transactions ran (3.9 lookups and 14.4 calls each, saldo bench
// payouts with every fault kind at 5 %), all queueing on the same rows.

// resultReq is one answer to record: a call's result or a lookup's.
type resultReq struct {
	rec *recordReq
	lu  *lookedUp
}

// resultRes is what recording it did: rec for a call, res for a lookup.
type resultRes struct {
	rec recorded
	res ResolveResult
}

// kindStats counts the batches holding one kind of answer (BatchStats).
type kindStats struct {
	batches, requests, fallbacks atomic.Int64
}

func (k *kindStats) add(n int) {
	if n > 0 {
		k.batches.Add(1)
		k.requests.Add(int64(n))
	}
}

func (k *kindStats) stats() groupcommit.Stats {
	return groupcommit.Stats{Batches: k.batches.Load(), Requests: k.requests.Load(), Fallbacks: k.fallbacks.Load()}
}

// recordFallback and lookupFallback count a batch redone one answer at a
// time (BatchStats, saldo_groupcommit_fallbacks_total{name="attempts_results"}).
func (s *Service) recordFallback() {
	s.recordStats.fallbacks.Add(1)
	s.results.Fallback()
}

func (s *Service) lookupFallback() {
	s.lookupStats.fallbacks.Add(1)
	s.results.Fallback()
}

// resultsMany records a batch of answers. Calls alone go to recordMany,
// lookups alone to resolveMany. With both, the calls recordMany would
// record together and the lookups resolveMany would apply together (an
// attempt named once, and not among those calls) share one transaction:
// the calls first (recordBatchTx), then the lookups in attempt id order
// (applyLookups), then every final attempt's owner and ledger effects. The
// others are recorded one by one after it. If the shared transaction
// fails, each side is redone as its own batcher redoes a failed batch: a
// call the database shows recorded, or a lookup bearing the batch's time,
// committed after all and is answered as it stands, not recorded again.
func (s *Service) resultsMany(ctx context.Context, reqs []resultReq) []groupcommit.Result[resultRes] {
	out := make([]groupcommit.Result[resultRes], len(reqs))
	var recs []recordReq
	var lus []lookedUp
	var recAt, luAt []int
	for i, r := range reqs {
		if r.rec != nil {
			recs, recAt = append(recs, *r.rec), append(recAt, i)
		} else {
			lus, luAt = append(lus, *r.lu), append(luAt, i)
		}
	}
	s.recordStats.add(len(recs))
	s.lookupStats.add(len(lus))
	apart := func() []groupcommit.Result[resultRes] {
		if len(recs) > 0 {
			for k, r := range s.recordMany(ctx, recs) {
				out[recAt[k]] = groupcommit.Result[resultRes]{Value: resultRes{rec: r.Value}, Err: r.Err}
			}
		}
		if len(lus) > 0 {
			for k, r := range s.resolveMany(ctx, lus) {
				out[luAt[k]] = groupcommit.Result[resultRes]{Value: resultRes{res: r.Value}, Err: r.Err}
			}
		}
		return out
	}
	// One kind only (every batch without faults): its own path, as before.
	if len(recs) == 0 || len(lus) == 0 {
		return apart()
	}

	// Which calls and lookups go together: recordMany's and resolveMany's
	// rules, and no attempt on both sides.
	seen := make(map[uuid.UUID]bool, len(reqs))
	recTogether, recAlone := s.splitRecords(recs, seen)
	luTogether, luAlone := splitLookups(lus, seen)
	if len(recTogether) == 0 || len(luTogether) == 0 {
		return apart()
	}

	recOut := make([]groupcommit.Result[recorded], len(recs))
	luOut := make([]groupcommit.Result[ResolveResult], len(lus))
	recBatch := make([]recordReq, len(recTogether))
	for k, i := range recTogether {
		recBatch[k] = recs[i]
	}
	// In attempt id order, as resolveMany applies its batches.
	slices.SortFunc(luTogether, func(i, j int) int { return bytes.Compare(lus[i].a.ID[:], lus[j].a.ID[:]) })
	luBatch := make([]lookedUp, len(luTogether))
	for k, i := range luTogether {
		luBatch[k] = lus[i]
	}
	s.sharedBatches.Add(1)
	now := s.lookupNow()
	var recRes []recorded
	var luRes []ResolveResult
	err := s.inTxFinals(ctx, func(tx pgx.Tx, after *afterCommit) error {
		var err error
		if recRes, err = s.recordBatchTx(ctx, tx, after, recBatch); err != nil {
			return err
		}
		luRes, err = s.applyLookups(ctx, tx, after, luBatch, now)
		return err
	})
	if err == nil {
		for k, i := range recTogether {
			recOut[i].Value = recRes[k]
		}
		for k, i := range luTogether {
			luOut[i].Value = s.retryIn(luRes[k])
		}
	} else {
		s.recordFallback()
		s.lookupFallback()
		s.log.ErrorContext(ctx, "attempts: recording a batch of calls and lookups failed; recording them one by one, each only if it did not commit",
			"calls", len(recBatch), "lookups", len(luBatch), "error", err)
		recAlone = append(recAlone, s.recordedAfterAll(ctx, recs, recTogether, recOut)...)
		for _, i := range luTogether {
			res, err := s.resolveOne(ctx, lus[i], &now)
			luOut[i] = groupcommit.Result[ResolveResult]{Value: s.retryIn(res), Err: err}
		}
	}
	for _, i := range recAlone {
		recOut[i].Value, recOut[i].Err = s.recordOne(ctx, recs[i])
	}
	// A second answer for an attempt was never in the batch: recorded as
	// its own, whatever the batch did.
	for _, i := range luAlone {
		res, err := s.resolveOne(ctx, lus[i], nil)
		luOut[i] = groupcommit.Result[ResolveResult]{Value: s.retryIn(res), Err: err}
	}
	for k, r := range recOut {
		out[recAt[k]] = groupcommit.Result[resultRes]{Value: resultRes{rec: r.Value}, Err: r.Err}
	}
	for k, r := range luOut {
		out[luAt[k]] = groupcommit.Result[resultRes]{Value: resultRes{res: r.Value}, Err: r.Err}
	}
	return out
}

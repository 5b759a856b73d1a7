package attempts

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/saldo/saldo/providers"
)

// ExecuteTogether makes the first call of each pending attempt of ids and
// records the calls as ONE record batch (recordBatch), in the order of ids:
// what Execute does for attempts whose results reach the recorder
// together, with a batch of a known composition and order, for tests.
func (s *Service) ExecuteTogether(ctx context.Context, ids []uuid.UUID) ([]Attempt, error) {
	reqs := make([]recordReq, len(ids))
	for i, r := range s.firstSendMany(ctx, ids) {
		if r.Err != nil {
			return nil, r.Err
		}
		a := r.Value
		if a.ID == uuid.Nil {
			return nil, fmt.Errorf("attempt %s is not ready for a first call", ids[i])
		}
		sr := s.providers[a.Provider].Submit(ctx, providers.SubmitRequest{Operation: providers.Operation(a.Operation),
			IdempotencyKey: a.IdempotencyKey, Reference: a.Reference, Payload: a.Payload})
		reqs[i] = recordReq{a: a, callNo: 1, sr: sr, outcome: Classify(sr)}
	}
	res, err := s.recordBatch(ctx, reqs)
	if err != nil {
		return nil, err
	}
	out := make([]Attempt, len(res))
	for i, r := range res {
		out[i] = r.a
	}
	return out, nil
}

// resolveTogether looks up each attempt of ids (due, awaiting resolution;
// before(i) runs before the ith lookup), then applies the lookups as ONE
// call of resolveMany, in the order of ids: what Resolve does for lookups
// that reach the resolver batcher together, with a batch of a known
// composition, for tests.
func (s *Service) resolveTogether(ctx context.Context, ids []uuid.UUID, before func(i int)) ([]ResolveResult, []error, error) {
	lus := make([]lookedUp, len(ids))
	for i, id := range ids {
		if before != nil {
			before(i)
		}
		a, err := s.Get(ctx, s.pool, id)
		if err != nil {
			return nil, nil, err
		}
		prov := s.providers[a.Provider]
		lr, err := lookup(ctx, prov, a)
		if err != nil {
			return nil, nil, err
		}
		lus[i] = lookedUp{a: a, lr: lr, class: classifyLookup(lr), window: prov.Capabilities().ConsistencyWindow}
	}
	res, errs := make([]ResolveResult, len(ids)), make([]error, len(ids))
	for i, r := range s.resolveMany(ctx, lus) {
		res[i], errs[i] = r.Value, r.Err
	}
	return res, errs, nil
}

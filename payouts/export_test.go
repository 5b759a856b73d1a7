package payouts

import "context"

// CreateTogether runs reqs through createMany as ONE batch (what the
// batcher does with requests that arrive together), for tests that need a
// batch of a known composition.
func (s *Service) CreateTogether(ctx context.Context, reqs []PayoutRequest) ([]Payout, []error) {
	batch := make([]createReq, len(reqs))
	for i, req := range reqs {
		r, err := s.prepareCreate(ctx, req)
		if err == nil {
			err = s.readyCreate(ctx, r)
		}
		if err != nil {
			panic(err)
		}
		batch[i] = r
	}
	res := s.createMany(ctx, batch)
	ps, errs := make([]Payout, len(res)), make([]error, len(res))
	for i, r := range res {
		ps[i], errs[i] = r.Value, r.Err
	}
	return ps, errs
}

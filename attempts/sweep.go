package attempts

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// SweepResult counts what one sweep did.
type SweepResult struct {
	// StaleToUnknown: pending attempts whose call started long ago and
	// recorded nothing, turned unknown.
	StaleToUnknown int
	// ResolversEnqueued: attempts awaiting resolution given a resolver job
	// (duplicates of a live job are skipped by River's uniqueness).
	ResolversEnqueued int
	// SubmitsEnqueued: pending attempts with nothing in flight and no live
	// submit job given one.
	SubmitsEnqueued int
}

// liveJobSQL matches a live River job of a kind for attempts.id.
const liveJobSQL = `EXISTS (SELECT 1 FROM river_job j WHERE j.kind = %s
	AND j.state IN ('available', 'pending', 'running', 'retryable', 'scheduled')
	AND j.args->>'attempt_id' = attempts.id::text)`

// Sweep is the periodic safety net:
//   - a pending attempt whose call started more than StaleCallAfter ago and
//     recorded nothing becomes unknown (the call may have left; R11);
//   - every attempt awaiting resolution (unknown, or pending and processing)
//     that is not in review and has no live resolver job gets one;
//   - every pending attempt with nothing in flight and no live submit job
//     gets one (a discarded job never strands an attempt).
//
// It also refreshes the gauges in Metrics.
func (s *Service) Sweep(ctx context.Context) (SweepResult, error) {
	var res SweepResult
	now := s.clock.Now()

	// Over by this process's StaleCallAfter and by the deadline the calling
	// process stamped (callOverAt): a process with a shorter setting never
	// counts another's call over while it may still be on its way.
	stale, err := queryIDs(ctx, s.pool, `SELECT id FROM attempts WHERE status = 'pending'
		AND call_count > calls_recorded AND call_started_at < $1 AND (call_deadline_at IS NULL OR call_deadline_at < $3)
		ORDER BY call_started_at LIMIT $2`,
		now.Add(-s.cfg.StaleCallAfter), s.cfg.SweepBatch, now)
	if err != nil {
		return res, err
	}
	for _, id := range stale {
		err := s.inTx(ctx, func(tx pgx.Tx, after *afterCommit) error {
			a, err := lockAttempt(ctx, tx, id)
			if err != nil {
				return err
			}
			if a.Status != StatusPending || !a.CallInFlight() || s.callOverAt(a).After(now) {
				return nil
			}
			tr, err := s.transition(ctx, tx, after, a, change{To: StatusUnknown, Actor: ActorSweeper,
				Reason: fmt.Sprintf("call %d started at %s and recorded nothing for over %s: it may have left; resolve by lookup",
					a.CallCount, fmtTime(a.CallStartedAt), s.cfg.StaleCallAfter)})
			if tr.Transitioned {
				res.StaleToUnknown++
			}
			return err
		})
		if err != nil {
			return res, fmt.Errorf("attempts: sweep stale call %s: %w", id, err)
		}
	}

	orphans, err := queryIDs(ctx, s.pool, `SELECT id FROM attempts WHERE NOT review
		AND (status = 'unknown' OR (status = 'pending' AND provider_state = 'processing' AND call_count = calls_recorded))
		AND NOT `+fmt.Sprintf(liveJobSQL, "'"+ResolveAttemptKind+"'")+` ORDER BY updated_at LIMIT $1`, s.cfg.SweepBatch)
	if err != nil {
		return res, err
	}
	// Not the attempts in review: Execute sends nothing for them (a human
	// decides, and review ends only with a final status), and each sweep
	// would enqueue them again, first in updated_at order, filling the
	// batch before a stranded attempt that needs a job.
	unsent, err := queryIDs(ctx, s.pool, `SELECT id FROM attempts WHERE status = 'pending' AND NOT review
		AND call_count = calls_recorded AND provider_state IS NULL
		AND NOT `+fmt.Sprintf(liveJobSQL, "'"+SubmitAttemptKind+"'")+` ORDER BY updated_at LIMIT $1`, s.cfg.SweepBatch)
	if err != nil {
		return res, err
	}
	if len(orphans)+len(unsent) > 0 {
		err = s.inTx(ctx, func(tx pgx.Tx, _ *afterCommit) error {
			res.ResolversEnqueued, res.SubmitsEnqueued = 0, 0
			for _, id := range orphans {
				r, err := s.riverClient(ctx).InsertTx(ctx, tx, ResolveAttemptArgs{AttemptID: id}, s.resolveOpts())
				if err != nil {
					return err
				}
				if !r.UniqueSkippedAsDuplicate {
					res.ResolversEnqueued++
				}
			}
			for _, id := range unsent {
				r, err := s.riverClient(ctx).InsertTx(ctx, tx, SubmitAttemptArgs{AttemptID: id}, s.submitOpts())
				if err != nil {
					return err
				}
				if !r.UniqueSkippedAsDuplicate {
					res.SubmitsEnqueued++
				}
			}
			return nil
		})
		if err != nil {
			return res, fmt.Errorf("attempts: sweep enqueue: %w", err)
		}
	}
	if res != (SweepResult{}) {
		s.log.InfoContext(ctx, "attempts sweep", "stale_to_unknown", res.StaleToUnknown,
			"resolvers_enqueued", res.ResolversEnqueued, "submits_enqueued", res.SubmitsEnqueued)
	}
	if err := s.refreshGauges(ctx, now); err != nil {
		return res, err
	}
	return res, nil
}

func (s *Service) refreshGauges(ctx context.Context, now time.Time) error {
	if s.metrics == nil {
		return nil
	}
	var oldestUnknown, oldestDue *time.Time
	var review int64
	err := s.pool.QueryRow(ctx, `SELECT
		(SELECT min(unknown_at) FROM attempts WHERE status = 'unknown'),
		(SELECT count(*) FROM attempts WHERE review AND (status IN ('pending', 'unknown')
			OR (diverged_at IS NOT NULL AND divergence_settled_at IS NULL))),
		(SELECT min(next_lookup_at) FROM attempts WHERE NOT review AND next_lookup_at <= $1
			AND (status = 'unknown' OR (status = 'pending' AND provider_state = 'processing')))`, now).
		Scan(&oldestUnknown, &review, &oldestDue)
	if err != nil {
		return err
	}
	age := func(t *time.Time) float64 {
		if t == nil || t.After(now) {
			return 0
		}
		return now.Sub(*t).Seconds()
	}
	s.metrics.OldestUnknownAge.Set(age(oldestUnknown))
	s.metrics.ReviewQueueSize.Set(float64(review))
	s.metrics.ResolverLag.Set(age(oldestDue))
	return nil
}

func queryIDs(ctx context.Context, db DB, sql string, args ...any) ([]uuid.UUID, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
}

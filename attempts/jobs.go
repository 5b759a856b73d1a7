package attempts

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// Job kinds.
const (
	SubmitAttemptKind  = "attempts.submit"
	ResolveAttemptKind = "attempts.resolve"
	SweepAttemptsKind  = "attempts.sweep"
)

// liveJobStates are the states in which a job still counts as "the" job of
// an attempt: one submitter and one resolver per attempt at a time. A
// completed job does not block a later one.
var liveJobStates = []rivertype.JobState{
	rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
	rivertype.JobStateRetryable, rivertype.JobStateScheduled,
}

// SubmitAttemptArgs sends (and re-sends when safe) one attempt.
type SubmitAttemptArgs struct {
	AttemptID uuid.UUID `json:"attempt_id" river:"unique"`
}

// Kind implements river.JobArgs.
func (SubmitAttemptArgs) Kind() string { return SubmitAttemptKind }

// ResolveAttemptArgs resolves one open attempt by lookup.
type ResolveAttemptArgs struct {
	AttemptID uuid.UUID `json:"attempt_id" river:"unique"`
}

// Kind implements river.JobArgs.
func (ResolveAttemptArgs) Kind() string { return ResolveAttemptKind }

// SweepAttemptsArgs runs the sweeper once.
type SweepAttemptsArgs struct{}

// Kind implements river.JobArgs.
func (SweepAttemptsArgs) Kind() string { return SweepAttemptsKind }

func (s *Service) submitOpts() *river.InsertOpts {
	return &river.InsertOpts{Queue: s.cfg.Queue, MaxAttempts: 25,
		UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: liveJobStates}}
}

func (s *Service) resolveOpts() *river.InsertOpts {
	return &river.InsertOpts{Queue: s.cfg.Queue, MaxAttempts: 25,
		UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: liveJobStates}}
}

// riverSchedulerInterval is how often River's scheduler makes scheduled
// jobs available (its default; River does not export it). A job snoozed
// for less than this is made available at once and fetched when due; a
// job scheduled at insertion waits for the scheduler.
const riverSchedulerInterval = 5 * time.Second

// resolveOptsFor is resolveOpts for a's resolver job: when a's first lookup
// is due further out than River's scheduler interval (30 s by default), the
// job is inserted scheduled for then. Inserted available, it ran at once
// only to find the lookup not due and snooze until it was: one job run, a
// read of the attempt and a River update per unknown attempt for nothing.
// River schedules by its own clock (the system's), so the delay is
// measured on the service's clock and added to the system's.
func (s *Service) resolveOptsFor(a Attempt) *river.InsertOpts {
	o := s.resolveOpts()
	if a.NextLookupAt != nil {
		if d := a.NextLookupAt.Sub(s.clock.Now()); d > riverSchedulerInterval {
			o.ScheduledAt = time.Now().Add(d)
		}
	}
	return o
}

// AddWorkers registers the SubmitAttempt, ResolveAttempt and SweepAttempts
// workers.
func (s *Service) AddWorkers(w *river.Workers) {
	river.AddWorker(w, &SubmitAttemptWorker{svc: s})
	river.AddWorker(w, &ResolveAttemptWorker{svc: s})
	river.AddWorker(w, &SweepAttemptsWorker{svc: s})
}

// PeriodicJobs returns the sweeper's periodic job.
func (s *Service) PeriodicJobs() []*river.PeriodicJob {
	return []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(s.cfg.SweepInterval),
		func() (river.JobArgs, *river.InsertOpts) {
			return SweepAttemptsArgs{}, &river.InsertOpts{Queue: s.cfg.Queue,
				UniqueOpts: river.UniqueOpts{ByPeriod: s.cfg.SweepInterval, ByState: liveJobStates}}
		}, &river.PeriodicJobOpts{ID: SweepAttemptsKind, RunOnStart: true})}
}

// SubmitAttemptWorker runs Execute: one provider call per run (R12). A safe
// re-send (not sent, rate limited) is an explicit snooze with the attempt's
// own backoff, never River's retry schedule.
type SubmitAttemptWorker struct {
	river.WorkerDefaults[SubmitAttemptArgs]
	svc *Service
}

// Timeout implements river.Worker.
func (w *SubmitAttemptWorker) Timeout(*river.Job[SubmitAttemptArgs]) time.Duration {
	return w.svc.cfg.JobTimeout
}

// Work implements river.Worker.
func (w *SubmitAttemptWorker) Work(ctx context.Context, job *river.Job[SubmitAttemptArgs]) error {
	res, err := w.svc.Execute(ctx, job.Args.AttemptID)
	if errors.Is(err, ErrNotFound) {
		return river.JobCancel(err)
	}
	if err != nil {
		return err
	}
	if res.RetryIn > 0 {
		return river.JobSnooze(res.RetryIn)
	}
	return nil
}

// ResolveAttemptWorker runs Resolve: one lookup per run, then an explicit
// snooze on the resolver schedule (R15).
type ResolveAttemptWorker struct {
	river.WorkerDefaults[ResolveAttemptArgs]
	svc *Service
}

// Timeout implements river.Worker.
func (w *ResolveAttemptWorker) Timeout(*river.Job[ResolveAttemptArgs]) time.Duration {
	return w.svc.cfg.JobTimeout
}

// Work implements river.Worker.
func (w *ResolveAttemptWorker) Work(ctx context.Context, job *river.Job[ResolveAttemptArgs]) error {
	res, err := w.svc.Resolve(ctx, job.Args.AttemptID)
	if errors.Is(err, ErrNotFound) {
		return river.JobCancel(err)
	}
	if err != nil {
		return err
	}
	if res.RetryIn > 0 {
		return river.JobSnooze(res.RetryIn)
	}
	return nil
}

// SweepAttemptsWorker runs Sweep.
type SweepAttemptsWorker struct {
	river.WorkerDefaults[SweepAttemptsArgs]
	svc *Service
}

// Work implements river.Worker.
func (w *SweepAttemptsWorker) Work(ctx context.Context, _ *river.Job[SweepAttemptsArgs]) error {
	_, err := w.svc.Sweep(ctx)
	return err
}

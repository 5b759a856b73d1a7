package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// RunArgs is the daily job of one provider's day.
type RunArgs struct {
	Provider string `json:"provider"`
	// Day is YYYY-MM-DD (UTC).
	Day string `json:"day"`
}

// Kind implements river.JobArgs.
func (RunArgs) Kind() string { return "reconcile.run" }

// RunWorker runs one reconciliation. A statement the provider cannot
// serve fails the job and River retries it with its backoff; re-running a
// day is idempotent.
type RunWorker struct {
	river.WorkerDefaults[RunArgs]
	svc *Service
}

// Timeout implements river.Worker.
func (w *RunWorker) Timeout(*river.Job[RunArgs]) time.Duration { return w.svc.cfg.JobTimeout }

// Work implements river.Worker.
func (w *RunWorker) Work(ctx context.Context, job *river.Job[RunArgs]) error {
	day, err := time.Parse(time.DateOnly, job.Args.Day)
	if err != nil {
		return river.JobCancel(fmt.Errorf("reconcile: bad day %q: %w", job.Args.Day, err))
	}
	// A day whose daily job started is not the catch-up's any more, whatever
	// becomes of this job (cancelled by an operator: catchUp).
	if _, err := w.svc.pool.Exec(ctx, `INSERT INTO reconcile_job_days (provider, day, recorded_at) VALUES ($1, $2, $3)
		ON CONFLICT DO NOTHING`, job.Args.Provider, Day(day), w.svc.clock.Now()); err != nil {
		return fmt.Errorf("reconcile: record the daily job of %s for %s: %w", job.Args.Provider, job.Args.Day, err)
	}
	if c, err := river.ClientFromContextSafely[pgx.Tx](ctx); err == nil {
		if err := w.svc.catchUp(ctx, c, job.Args.Provider, day); err != nil {
			return err
		}
	}
	// The daily job reconciles a provider's day once. River's uniqueness
	// alone cannot say so: it forgets a completed job after
	// engine.Config.CompletedJobsKept (an hour by default), and a leader
	// started later that day inserts the job again (RunOnStart), which would
	// read the provider's whole statement for the day again. A run by an
	// operator or by saldo reconcile is never skipped.
	var done bool
	if err := w.svc.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM reconcile_runs WHERE provider = $1 AND day = $2
		AND status = 'succeeded' AND triggered_by LIKE 'job:%')`, job.Args.Provider, Day(day)).Scan(&done); err != nil {
		return fmt.Errorf("reconcile: daily run of %s for %s: %w", job.Args.Provider, job.Args.Day, err)
	}
	if done {
		return nil
	}
	_, err = w.svc.Run(ctx, job.Args.Provider, day, RunOptions{TriggeredBy: fmt.Sprintf("job:%d", job.ID)})
	if errors.Is(err, ErrUnknownProvider) || errors.Is(err, ErrNoStatements) {
		return river.JobCancel(err)
	}
	if errors.Is(err, ErrDayNotClosed) {
		return river.JobSnooze(w.svc.cfg.SettleMargin)
	}
	return err
}

// CatchUpDays bounds the days a daily job catches up: it enqueues the
// daily run of every day among the CatchUpDays before the last closed one
// that no daily run reconciled (a leader down longer than a day). Older
// days are an operator's (saldo reconcile --day).
const CatchUpDays = 7

// catchUp enqueues the daily runs of the days before day, back to
// CatchUpDays before the last closed day, that no daily run reconciled
// since the provider's first one (a fresh install catches up nothing: the
// days before it are no business of saldo's) and that no daily job was
// enqueued by a catch-up or started for (reconcile_job_days, recorded in
// the transaction that enqueues them). Each is its own job, unique by its
// provider and day like the daily one: a day a job is still retrying is
// not enqueued twice, and a day whose job was cancelled (an operator, in
// River's UI) or discarded is not enqueued again by every later daily job,
// though River's uniqueness does not count such a job (R19). That day is
// the operator's (saldo reconcile --date).
func (s *Service) catchUp(ctx context.Context, c *river.Client[pgx.Tx], provider string, day time.Time) error {
	from := DayToReconcile(s.clock.Now(), s.cfg.SettleMargin).AddDate(0, 0, -CatchUpDays)
	var days []time.Time
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `INSERT INTO reconcile_job_days (provider, day, recorded_at)
			SELECT $1, d::date, $4 FROM generate_series($2::date, $3::date, interval '1 day') d
			WHERE d >= (SELECT min(day) FROM reconcile_runs WHERE provider = $1 AND status = 'succeeded' AND triggered_by LIKE 'job:%')
				AND NOT EXISTS (SELECT 1 FROM reconcile_runs r WHERE r.provider = $1 AND r.day = d::date AND r.status = 'succeeded'
					AND r.triggered_by LIKE 'job:%')
			ON CONFLICT DO NOTHING
			RETURNING day`, provider, from, Day(day).AddDate(0, 0, -1), s.clock.Now())
		if err != nil {
			return err
		}
		if days, err = pgx.CollectRows(rows, pgx.RowTo[time.Time]); err != nil {
			return err
		}
		if len(days) == 0 {
			return nil
		}
		sort.Slice(days, func(i, j int) bool { return days[i].Before(days[j]) })
		params := make([]river.InsertManyParams, 0, len(days))
		for _, d := range days {
			params = append(params, river.InsertManyParams{Args: RunArgs{Provider: provider, Day: d.Format(time.DateOnly)},
				InsertOpts: &river.InsertOpts{Queue: s.cfg.Queue, UniqueOpts: river.UniqueOpts{ByArgs: true}}})
		}
		_, err = c.InsertManyTx(ctx, tx, params)
		return err
	})
	if err != nil {
		return fmt.Errorf("reconcile: enqueue missed days of %s: %w", provider, err)
	}
	if len(days) > 0 {
		names := make([]string, 0, len(days))
		for _, d := range days {
			names = append(names, d.Format(time.DateOnly))
		}
		s.log.WarnContext(ctx, "reconcile: catching up days no daily run reconciled", "provider", provider, "days", names)
	}
	return nil
}

// AddWorkers registers the run worker.
func (s *Service) AddWorkers(w *river.Workers) {
	river.AddWorker(w, &RunWorker{svc: s})
}

// dailySchedule fires every day at 00:00 UTC plus the settle margin.
type dailySchedule struct{ margin time.Duration }

func (d dailySchedule) Next(current time.Time) time.Time {
	offset := d.margin % (24 * time.Hour)
	next := Day(current).Add(offset)
	for !next.After(current) {
		next = next.Add(24 * time.Hour)
	}
	return next
}

// DayToReconcile is the day a daily run started at now reconciles: the
// last UTC day that ended at least margin ago.
func DayToReconcile(now time.Time, margin time.Duration) time.Time {
	return Day(now.Add(-margin)).AddDate(0, 0, -1)
}

// PeriodicJobs returns one daily job per configured provider that
// publishes statements: at 00:00 UTC plus SettleMargin it reconciles the
// day that closed (unique per provider and day, also on start, so a
// restarted leader catches up on the last day, and its job on the days
// before it that no daily run reconciled, up to CatchUpDays: catchUp).
func (s *Service) PeriodicJobs() []*river.PeriodicJob {
	var out []*river.PeriodicJob
	for _, name := range s.Providers() {
		out = append(out, river.NewPeriodicJob(dailySchedule{s.cfg.SettleMargin},
			func() (river.JobArgs, *river.InsertOpts) {
				day := DayToReconcile(s.clock.Now(), s.cfg.SettleMargin)
				return RunArgs{Provider: name, Day: day.Format(time.DateOnly)},
					&river.InsertOpts{Queue: s.cfg.Queue, UniqueOpts: river.UniqueOpts{ByArgs: true}}
			}, &river.PeriodicJobOpts{ID: "reconcile.run:" + name, RunOnStart: true}))
	}
	return out
}

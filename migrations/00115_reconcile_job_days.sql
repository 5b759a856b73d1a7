-- +goose Up
-- R19: the days a daily reconciliation job (reconcile.run) was enqueued
-- for by the catch-up, or started for. The catch-up of each daily job
-- enqueues a day among the 7 before it that no daily run reconciled only
-- when the day has no row here: a day whose job an operator cancelled (or
-- River discarded) is not enqueued again by every later daily job. River's
-- uniqueness cannot say so: it does not count cancelled or discarded jobs,
-- and deletes them after a day. Such a day is the operator's (saldo
-- reconcile --date).
CREATE TABLE reconcile_job_days (
    provider    text        NOT NULL,
    day         date        NOT NULL,
    recorded_at timestamptz NOT NULL,
    PRIMARY KEY (provider, day)
);

-- +goose Down
DROP TABLE reconcile_job_days;

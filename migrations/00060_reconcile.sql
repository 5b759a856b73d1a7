-- +goose Up
-- Daily reconciliation against the providers' statements (issue 16, R19).
-- Package reconcile is the only writer.

-- One row per run of one provider's day (the daily job or saldo reconcile).
-- Re-running a day makes a new run; what it finds lands in
-- reconcile_divergences once (see its unique key).
CREATE TABLE reconcile_runs (
    id               text PRIMARY KEY CHECK (id ~ '^rr_[0-9a-f]{32}$'),
    provider         text NOT NULL CHECK (length(provider) BETWEEN 1 AND 100),
    day              date NOT NULL,
    status           text NOT NULL CHECK (status IN ('running', 'succeeded', 'failed')),
    -- who started it: job, cli, test, or an operator's key id
    triggered_by     text NOT NULL CHECK (length(triggered_by) BETWEEN 1 AND 200),
    started_at       timestamptz NOT NULL,
    finished_at      timestamptz,
    -- counts: statement lines read, lines matched to an attempt, attempts
    -- resolved by this run, divergences seen by this run and those new to it,
    -- succeeded attempts whose "that day or the next" is not closed yet
    statement_lines  integer NOT NULL DEFAULT 0,
    matched          integer NOT NULL DEFAULT 0,
    resolved         integer NOT NULL DEFAULT 0,
    divergences      integer NOT NULL DEFAULT 0,
    new_divergences  integer NOT NULL DEFAULT 0,
    deferred         integer NOT NULL DEFAULT 0,
    -- the ledger side: per currency, the statement's and the ledger's
    -- outgoing and incoming sums (JSON array)
    totals           jsonb NOT NULL DEFAULT '[]',
    error            text CHECK (length(error) <= 2000),
    CHECK ((status = 'running') = (finished_at IS NULL))
);
CREATE INDEX reconcile_runs_day ON reconcile_runs (provider, day, started_at);

-- One row per divergence, found once whatever the number of runs that see
-- it: (provider, kind, fingerprint) is unique, and a re-run only bumps
-- last_seen_at / seen_count (and, while open, refreshes both sides).
--
-- kind and severity:
--   resolved_by_reconciliation  info      the statement resolved an open attempt (stored resolved)
--   paid_but_failed             critical  provider moved money, our attempt is failed
--   unknown_to_us               critical  provider moved money, no attempt of ours
--   double_payment              critical  two provider operations for one reference or intent
--   missing_at_provider         high      our attempt succeeded, not on that day's or the next statement
--   amount_mismatch             high      amount, currency or operation differ
--   ledger_totals               high      the ledger's sums differ from the statement's (per currency)
--   stale_open                  medium    attempt unknown or in review longer than the threshold
CREATE TABLE reconcile_divergences (
    id                text PRIMARY KEY CHECK (id ~ '^dv_[0-9a-f]{32}$'),
    provider          text NOT NULL CHECK (length(provider) BETWEEN 1 AND 100),
    day               date NOT NULL,
    kind              text NOT NULL CHECK (kind IN ('resolved_by_reconciliation', 'paid_but_failed', 'unknown_to_us',
                        'double_payment', 'missing_at_provider', 'amount_mismatch', 'ledger_totals', 'stale_open')),
    severity          text NOT NULL CHECK (severity IN ('critical', 'high', 'medium', 'info')),
    fingerprint       text NOT NULL CHECK (length(fingerprint) BETWEEN 1 AND 500),
    reference         text,
    provider_id       text,
    attempt_id        uuid REFERENCES attempts (id),
    subject_id        text,
    currency          text,
    detail            text NOT NULL CHECK (length(detail) <= 2000),
    -- both sides: what the statement says and what saldo says
    provider_side     jsonb NOT NULL DEFAULT '{}',
    our_side          jsonb NOT NULL DEFAULT '{}',
    status            text NOT NULL CHECK (status IN ('open', 'resolved')),
    first_run_id      text NOT NULL REFERENCES reconcile_runs (id),
    last_run_id       text NOT NULL REFERENCES reconcile_runs (id),
    seen_count        integer NOT NULL DEFAULT 1 CHECK (seen_count >= 1),
    created_at        timestamptz NOT NULL,
    last_seen_at      timestamptz NOT NULL,
    resolved_at       timestamptz,
    -- 'reconciliation' or the operator's key id
    resolved_by       text,
    resolution_reason text CHECK (length(resolution_reason) <= 2000),
    CONSTRAINT reconcile_divergences_once UNIQUE (provider, kind, fingerprint),
    CHECK ((status = 'resolved') = (resolved_at IS NOT NULL AND resolved_by IS NOT NULL AND resolution_reason IS NOT NULL))
);
-- Keyset order of the API and CSV: newest first.
CREATE INDEX reconcile_divergences_page ON reconcile_divergences (created_at DESC, id DESC);
CREATE INDEX reconcile_divergences_open ON reconcile_divergences (severity, provider, kind) WHERE status = 'open';
CREATE INDEX reconcile_divergences_attempt ON reconcile_divergences (attempt_id) WHERE attempt_id IS NOT NULL;

-- A resolved divergence stays resolved, and what it recorded never changes
-- (only last_seen_at, last_run_id and seen_count move on a re-run).
-- +goose StatementBegin
CREATE FUNCTION reconcile_divergences_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'reconcile divergences are never deleted (%)', OLD.id USING ERRCODE = 'raise_exception';
    END IF;
    IF NEW.id <> OLD.id OR NEW.provider <> OLD.provider OR NEW.kind <> OLD.kind OR NEW.fingerprint <> OLD.fingerprint
       OR NEW.severity <> OLD.severity OR NEW.created_at <> OLD.created_at OR NEW.first_run_id <> OLD.first_run_id THEN
        RAISE EXCEPTION 'reconcile divergence % identity is immutable', OLD.id USING ERRCODE = 'raise_exception';
    END IF;
    IF OLD.status = 'resolved' AND (NEW.status <> 'resolved' OR NEW.resolved_at IS DISTINCT FROM OLD.resolved_at
       OR NEW.resolved_by IS DISTINCT FROM OLD.resolved_by OR NEW.resolution_reason IS DISTINCT FROM OLD.resolution_reason
       OR NEW.provider_side <> OLD.provider_side OR NEW.our_side <> OLD.our_side OR NEW.detail <> OLD.detail) THEN
        RAISE EXCEPTION 'reconcile divergence % is resolved: it stays as it was resolved', OLD.id
            USING ERRCODE = 'raise_exception';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER reconcile_divergences_guard BEFORE UPDATE OR DELETE ON reconcile_divergences
    FOR EACH ROW EXECUTE FUNCTION reconcile_divergences_guard();

-- +goose Down
DROP TRIGGER reconcile_divergences_guard ON reconcile_divergences;
DROP FUNCTION reconcile_divergences_guard();
DROP TABLE reconcile_divergences;
DROP TABLE reconcile_runs;

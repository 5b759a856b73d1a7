-- +goose Up
-- Attempts (docs/rules.md R1-R20): one row per conversation with a provider to
-- realise one subject (a payout, transfer, refund, split leg or charge). The
-- idempotency key, our reference and the exact payload bytes are written here
-- before any I/O (R4, R5, R13) and never change afterwards.
CREATE TABLE attempts (
    id                uuid PRIMARY KEY,
    kind              text NOT NULL CHECK (kind IN
                        ('payout', 'pix_transfer', 'refund', 'split_leg', 'card_charge', 'pix_charge')),
    -- direction groups kinds whose subjects share one id space: money out
    -- (payouts domain) and money in (charges domain). At most one open attempt
    -- per (direction, subject_id).
    direction         text NOT NULL GENERATED ALWAYS AS (
                        CASE WHEN kind IN ('card_charge', 'pix_charge') THEN 'in' ELSE 'out' END) STORED,
    subject_id        text NOT NULL CHECK (length(subject_id) BETWEEN 1 AND 200),
    provider          text NOT NULL CHECK (length(provider) BETWEEN 1 AND 100),
    operation         text NOT NULL CHECK (length(operation) BETWEEN 1 AND 100),
    idempotency_key   text NOT NULL UNIQUE CHECK (length(idempotency_key) BETWEEN 16 AND 255),
    reference         text NOT NULL UNIQUE CHECK (reference ~ '^[0-9a-f]{32}$'),
    payload           bytea NOT NULL,
    payload_sha256    bytea NOT NULL,
    status            text NOT NULL DEFAULT 'pending'
                        CHECK (status IN ('pending', 'succeeded', 'failed', 'unknown')),
    -- provider_state is the provider's last reported state ('processing'
    -- keeps a pending attempt open while the provider works on it).
    provider_state    text CHECK (provider_state IN ('succeeded', 'processing', 'failed')),
    provider_id       text,
    failure_code      text,
    failure_reason    text,
    -- call_count is incremented durably BEFORE each HTTP call (R11, R12);
    -- calls_recorded after its result is recorded. call_count >
    -- calls_recorded means a call may have left and its answer was lost.
    call_count        integer NOT NULL DEFAULT 0 CHECK (call_count >= 0),
    calls_recorded    integer NOT NULL DEFAULT 0 CHECK (calls_recorded >= 0 AND calls_recorded <= call_count),
    call_started_at   timestamptz,
    call_ended_at     timestamptz,
    next_send_at      timestamptz,
    last_error        text,
    key_expires_at    timestamptz,
    lookup_count      integer NOT NULL DEFAULT 0 CHECK (lookup_count >= 0),
    last_lookup_at    timestamptz,
    next_lookup_at    timestamptz,
    processing_since  timestamptz,
    review            boolean NOT NULL DEFAULT false,
    review_reason     text,
    review_at         timestamptz,
    unknown_at        timestamptz,
    resolved_at       timestamptz,
    resolved_by       text,
    data              jsonb,
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    CHECK (octet_length(payload_sha256) = 32),
    CHECK (sha256(payload) = payload_sha256),
    CHECK ((status IN ('succeeded', 'failed')) = (resolved_at IS NOT NULL)),
    CHECK (NOT review OR (review_reason IS NOT NULL AND review_at IS NOT NULL))
);

-- R8: at most one open attempt per subject, enforced here, not by an if.
CREATE UNIQUE INDEX attempts_one_open_per_subject
    ON attempts (direction, subject_id) WHERE status IN ('pending', 'unknown');
-- A subject is realised at most once.
CREATE UNIQUE INDEX attempts_one_succeeded_per_subject
    ON attempts (direction, subject_id) WHERE status = 'succeeded';
-- The provider's id is unique per provider once known.
CREATE UNIQUE INDEX attempts_provider_id
    ON attempts (provider, provider_id) WHERE provider_id IS NOT NULL;
CREATE INDEX attempts_subject ON attempts (subject_id, created_at);
CREATE INDEX attempts_open ON attempts (status, call_started_at) WHERE status IN ('pending', 'unknown');
CREATE INDEX attempts_review ON attempts (review_at, id) WHERE review AND status IN ('pending', 'unknown');

-- R9 enforced by the database: only pending -> succeeded | failed | unknown
-- and unknown -> succeeded | failed; what identifies the attempt never
-- changes; attempts are never deleted.
-- +goose StatementBegin
CREATE FUNCTION attempts_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'attempts are never deleted (attempt %)', OLD.id
            USING ERRCODE = 'raise_exception';
    END IF;
    IF NEW.id <> OLD.id OR NEW.kind <> OLD.kind OR NEW.subject_id <> OLD.subject_id
       OR NEW.provider <> OLD.provider OR NEW.operation <> OLD.operation
       OR NEW.idempotency_key <> OLD.idempotency_key OR NEW.reference <> OLD.reference
       OR NEW.payload <> OLD.payload OR NEW.payload_sha256 <> OLD.payload_sha256
       OR NEW.created_at <> OLD.created_at THEN
        RAISE EXCEPTION 'attempt % identity is immutable (R4, R5)', OLD.id
            USING ERRCODE = 'raise_exception';
    END IF;
    IF OLD.provider_id IS NOT NULL AND NEW.provider_id IS DISTINCT FROM OLD.provider_id THEN
        RAISE EXCEPTION 'attempt % provider_id is immutable once known', OLD.id
            USING ERRCODE = 'raise_exception';
    END IF;
    IF NEW.call_count < OLD.call_count OR NEW.calls_recorded < OLD.calls_recorded THEN
        RAISE EXCEPTION 'attempt % call counters never go back', OLD.id
            USING ERRCODE = 'raise_exception';
    END IF;
    IF NEW.status <> OLD.status AND NOT (
           (OLD.status = 'pending' AND NEW.status IN ('succeeded', 'failed', 'unknown'))
        OR (OLD.status = 'unknown' AND NEW.status IN ('succeeded', 'failed'))) THEN
        RAISE EXCEPTION 'attempt % transition % -> % is not allowed (R9)', OLD.id, OLD.status, NEW.status
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER attempts_guard BEFORE UPDATE OR DELETE ON attempts
    FOR EACH ROW EXECUTE FUNCTION attempts_guard();

-- Every HTTP call (submit or lookup) and every transition, append-only.
CREATE TABLE attempt_events (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    attempt_id          uuid NOT NULL REFERENCES attempts (id),
    at                  timestamptz NOT NULL,
    type                text NOT NULL CHECK (type IN
                          ('opened', 'call', 'lookup', 'transition', 'processing', 'review', 'note')),
    -- actor: worker, webhook, resolver, reconciliation, operator, sweeper, opener
    actor               text NOT NULL CHECK (actor IN
                          ('opener', 'worker', 'webhook', 'resolver', 'reconciliation', 'operator', 'sweeper')),
    actor_id            text,
    from_status         text,
    to_status           text,
    reason              text,
    call_number         integer,
    started_at          timestamptz,
    ended_at            timestamptz,
    outcome             text,
    status_code         integer,
    provider_request_id text,
    wire_calls          integer,
    error               text CHECK (length(error) <= 2000),
    evidence            jsonb
);
CREATE INDEX attempt_events_attempt ON attempt_events (attempt_id, id);

-- +goose StatementBegin
CREATE FUNCTION attempt_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'attempt_events is append-only (% refused)', TG_OP
        USING ERRCODE = 'raise_exception';
END
$$;
-- +goose StatementEnd

CREATE TRIGGER attempt_events_append_only BEFORE UPDATE OR DELETE ON attempt_events
    FOR EACH ROW EXECUTE FUNCTION attempt_events_append_only();
CREATE TRIGGER attempt_events_no_truncate BEFORE TRUNCATE ON attempt_events
    FOR EACH STATEMENT EXECUTE FUNCTION attempt_events_append_only();

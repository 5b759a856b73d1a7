-- +goose Up
-- The console (issue 18): browser sessions, one-time login links and the
-- results of audit verifications run from the console.

-- A console session: an API key exchanged for a session cookie. The cookie
-- carries a random 256-bit token; only its sha256 is stored (like API key
-- secrets), so a leak of this table signs nobody in. Sessions are stored
-- here rather than in a signed cookie so that signing out, revoking the key
-- or deleting the row ends them at once on every saldo process.
CREATE TABLE console_sessions (
    token_sha256 bytea PRIMARY KEY CHECK (length(token_sha256) = 32),
    key_id       text NOT NULL REFERENCES api_keys (id),
    -- the CSRF token every form of the session carries
    csrf_token   text NOT NULL CHECK (length(csrf_token) >= 32),
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    CHECK (expires_at > created_at)
);
CREATE INDEX console_sessions_expires ON console_sessions (expires_at);
CREATE INDEX console_sessions_key ON console_sessions (key_id);

-- One-time login links (saldo dev prints one for the demo operator). Only
-- the sha256 of the link's token is stored; a link works once, before it
-- expires.
CREATE TABLE console_login_links (
    token_sha256 bytea PRIMARY KEY CHECK (length(token_sha256) = 32),
    key_id       text NOT NULL REFERENCES api_keys (id),
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    used_at      timestamptz
);

-- Results of `audit.Run` started from the console ("Run verification").
-- The verification itself reads only; this row is all it writes.
CREATE TABLE console_audit_runs (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_by       text NOT NULL,
    started_at   timestamptz NOT NULL,
    finished_at  timestamptz NOT NULL,
    ok           boolean NOT NULL,
    accounts     bigint NOT NULL DEFAULT 0,
    transactions bigint NOT NULL DEFAULT 0,
    postings     bigint NOT NULL DEFAULT 0,
    -- [{"area":..., "check":..., "detail":...}], at most 200
    violations   jsonb NOT NULL DEFAULT '[]',
    violation_count integer NOT NULL DEFAULT 0,
    -- set when a check could not run
    error        text NOT NULL DEFAULT ''
);
CREATE INDEX console_audit_runs_finished ON console_audit_runs (finished_at DESC);

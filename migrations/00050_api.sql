-- +goose Up
-- The HTTP API (issue 7): API keys, idempotent requests, provider webhook
-- deduplication and outbound notifications (R24).

-- API keys. The secret ("sk_" + 52 base32 characters, 256 random bits) is
-- shown once and never stored: only its sha256 is. A high-entropy secret
-- needs no slow hash; the lookup is by the digest. prefix is the first
-- characters of the secret, for humans to tell keys apart.
CREATE TABLE api_keys (
    id            text PRIMARY KEY CHECK (id ~ '^key_[0-9a-f]{16}$'),
    prefix        text NOT NULL,
    secret_sha256 bytea NOT NULL UNIQUE CHECK (length(secret_sha256) = 32),
    role          text NOT NULL CHECK (role IN ('merchant', 'auditor', 'operator', 'admin')),
    merchant_id   text REFERENCES merchants (id),
    name          text NOT NULL DEFAULT '' CHECK (length(name) <= 200),
    created_at    timestamptz NOT NULL,
    revoked_at    timestamptz,
    -- a merchant key names exactly one merchant; no other role names one
    CONSTRAINT api_keys_merchant_scope CHECK ((role = 'merchant') = (merchant_id IS NOT NULL))
);

-- Idempotent POSTs. One row per (API key, Idempotency-Key). The row is
-- inserted as 'running' in its own committed transaction before the request
-- runs, so a concurrent request with the same key sees it and gets 409; it
-- becomes 'done' with the response once the request finished. Rows are kept
-- at least 24 hours (api.Server.CleanupIdempotency deletes older ones).
CREATE TABLE idempotent_requests (
    key_id        text NOT NULL REFERENCES api_keys (id),
    idem_key      text NOT NULL CHECK (length(idem_key) BETWEEN 1 AND 255),
    -- sha256 of method, path and raw body
    request_hash  bytea NOT NULL,
    method        text NOT NULL,
    path          text NOT NULL,
    state         text NOT NULL CHECK (state IN ('running', 'done')),
    -- a running row whose lease passed belongs to a request that died; a
    -- retry may take it over (the domain keys below it stop double effects)
    lease_until   timestamptz NOT NULL,
    status        integer,
    content_type  text,
    response_body bytea,
    created_at    timestamptz NOT NULL,
    completed_at  timestamptz,
    PRIMARY KEY (key_id, idem_key),
    CONSTRAINT idempotent_requests_done CHECK (state = 'running' OR (status IS NOT NULL AND response_body IS NOT NULL))
);
CREATE INDEX idempotent_requests_created ON idempotent_requests (created_at);

-- Provider webhook events seen, by the provider's event id: a duplicate
-- delivery is acknowledged and changes nothing.
CREATE TABLE webhook_events (
    provider    text NOT NULL,
    event_id    text NOT NULL CHECK (length(event_id) BETWEEN 1 AND 255),
    type        text NOT NULL DEFAULT '',
    operation   text NOT NULL DEFAULT '',
    reference   text NOT NULL DEFAULT '',
    state       text NOT NULL DEFAULT '',
    -- what handling it did: transitioned, unchanged, charge, unmatched
    outcome     text NOT NULL,
    received_at timestamptz NOT NULL,
    PRIMARY KEY (provider, event_id)
);

-- Outbound notifications (R24). A merchant registers URLs; each gets its own
-- signing secret (kept to sign, so stored as is: it is ours, not the
-- merchant's credential to us).
CREATE TABLE notification_endpoints (
    id          text PRIMARY KEY CHECK (id ~ '^we_[0-9a-f]{32}$'),
    merchant_id text NOT NULL REFERENCES merchants (id),
    url         text NOT NULL CHECK (url ~ '^https?://' AND length(url) <= 2000),
    secret      text NOT NULL,
    created_at  timestamptz NOT NULL,
    disabled_at timestamptz
);
CREATE INDEX notification_endpoints_merchant ON notification_endpoints (merchant_id);

-- One row per event per endpoint, inserted in the transaction that made the
-- object final, together with the River job that delivers it.
CREATE TABLE notification_events (
    id           text PRIMARY KEY CHECK (id ~ '^evt_[0-9a-f]{32}$'),
    endpoint_id  text NOT NULL REFERENCES notification_endpoints (id),
    merchant_id  text NOT NULL REFERENCES merchants (id),
    type         text NOT NULL,
    object_id    text NOT NULL,
    -- what makes the event unique for its object (a payout's final attempt)
    dedupe_key   text NOT NULL,
    payload      bytea NOT NULL,
    created_at   timestamptz NOT NULL,
    attempts     integer NOT NULL DEFAULT 0,
    last_status  integer,
    last_error   text,
    delivered_at timestamptz,
    UNIQUE (endpoint_id, dedupe_key)
);
CREATE INDEX notification_events_object ON notification_events (object_id);

-- +goose Up
-- R4, R8, R16: attempts keep only the provider's name ("stripe", "pix",
-- "sim"). A process configured with the same name for another account (a
-- test key beside a live one, two Pix PSPs both called "pix", a sim at
-- another URL) looks up the attempts another process sent at the wrong
-- account, reads "not found", fails them after the consistency window,
-- frees their reserve, and the retry pays a second time. saldo serve
-- records here which account each name means, and refuses to start with
-- another (cmd/saldo, provider_identity.go).
CREATE TABLE provider_identities (
    name             text PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 100),
    -- Which account at which PSP, without any secret, as the adapter
    -- describes it (providers.Identity.Account).
    account          text NOT NULL CHECK (length(account) BETWEEN 1 AND 2000),
    -- sha256 of the non-secret configuration and of an HMAC of the secret
    -- keyed by fingerprint_key (never the secret, never its plain hash):
    -- when the PSP cannot say which account a key is (an outage), the
    -- same fingerprint as the last confirmed start proves the same account.
    fingerprint      text NOT NULL CHECK (fingerprint ~ '^[0-9a-f]{64}$'),
    fingerprint_key  bytea NOT NULL CHECK (octet_length(fingerprint_key) = 32),
    recorded_at      timestamptz NOT NULL,
    -- The last start that confirmed the account (the PSP answered, or the
    -- identity needs no network), and the last fingerprint change.
    confirmed_at     timestamptz NOT NULL,
    fingerprint_at   timestamptz NOT NULL
);

-- Every recording, key rotation and deliberate re-pointing of a name,
-- append-only: who changed what, when.
CREATE TABLE provider_identity_events (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name            text NOT NULL REFERENCES provider_identities (name),
    at              timestamptz NOT NULL,
    kind            text NOT NULL CHECK (kind IN ('recorded', 'fingerprint_changed', 'repointed')),
    account_before  text CHECK (length(account_before) <= 2000),
    account_after   text NOT NULL CHECK (length(account_after) BETWEEN 1 AND 2000),
    actor           text NOT NULL CHECK (length(actor) BETWEEN 1 AND 500),
    CHECK ((kind = 'repointed') = (account_before IS NOT NULL AND account_before <> account_after))
);
CREATE INDEX provider_identity_events_name ON provider_identity_events (name, at);

-- +goose StatementBegin
CREATE FUNCTION provider_identity_events_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'provider identity events are never changed or deleted (event %)', OLD.id
        USING ERRCODE = 'raise_exception';
END
$$;
-- +goose StatementEnd

CREATE TRIGGER provider_identity_events_guard BEFORE UPDATE OR DELETE ON provider_identity_events
    FOR EACH ROW EXECUTE FUNCTION provider_identity_events_guard();

-- +goose Down
DROP TABLE provider_identity_events;
DROP FUNCTION provider_identity_events_guard();
DROP TABLE provider_identities;

-- +goose Up
-- Outgoing money (docs/rules.md R21-R23): bank payouts, Pix transfers, refunds and
-- split payout legs. A payout is the intent; its attempts (package attempts,
-- subject_id = payouts.id) are each conversation with the provider. The
-- merchant's available balance is reserved in the transaction that opens an
-- attempt and released only when that attempt resolves failed (R22).

-- Caller-side idempotency of creation: one row per (merchant, client key),
-- with the hash of the request, pointing at what it created.
CREATE TABLE payout_requests (
    merchant_id   text NOT NULL REFERENCES merchants (id),
    client_key    text NOT NULL CHECK (length(client_key) BETWEEN 1 AND 255),
    request_hash  bytea NOT NULL CHECK (octet_length(request_hash) = 32),
    object_kind   text NOT NULL CHECK (object_kind IN ('payout', 'split', 'refund')),
    object_id     text NOT NULL,
    created_at    timestamptz NOT NULL,
    PRIMARY KEY (merchant_id, client_key)
);

CREATE TABLE splits (
    id           text PRIMARY KEY CHECK (id ~ '^sp_[0-9a-f]{32}$'),
    merchant_id  text NOT NULL REFERENCES merchants (id),
    currency     text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    total        numeric(30, 8) NOT NULL CHECK (total > 0),
    leg_count    integer NOT NULL CHECK (leg_count BETWEEN 1 AND 100),
    description  text,
    metadata     jsonb NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL
);
CREATE INDEX splits_merchant ON splits (merchant_id, created_at DESC, id DESC);

CREATE TABLE payouts (
    id                  text PRIMARY KEY CHECK (id ~ '^po_[0-9a-f]{32}$'),
    merchant_id         text NOT NULL REFERENCES merchants (id),
    -- kind is the attempts kind: payout (bank payout), pix_transfer,
    -- refund, split_leg.
    kind                text NOT NULL CHECK (kind IN ('payout', 'pix_transfer', 'refund', 'split_leg')),
    operation           text NOT NULL CHECK (operation IN ('bank_payout', 'pix_transfer', 'refund')),
    provider            text NOT NULL,
    amount              numeric(30, 8) NOT NULL CHECK (amount > 0),
    currency            text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    destination         jsonb,
    description         text,
    metadata            jsonb NOT NULL DEFAULT '{}',
    charge_id           text,
    split_id            text REFERENCES splits (id),
    leg_index           integer,
    -- status the caller sees: processing while the current attempt is
    -- pending or unknown; succeeded or failed once it is final. A failed
    -- payout may be retried (a new attempt with a new key, R6).
    status              text NOT NULL CHECK (status IN ('processing', 'succeeded', 'failed')),
    failure_code        text,
    failure_reason      text,
    current_attempt_id  uuid REFERENCES attempts (id),
    attempt_count       integer NOT NULL DEFAULT 0,
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    CHECK ((split_id IS NULL) = (kind <> 'split_leg')),
    CHECK ((charge_id IS NULL) = (kind <> 'refund')),
    CHECK (kind = 'refund' OR destination IS NOT NULL)
);
CREATE INDEX payouts_merchant ON payouts (merchant_id, created_at DESC, id DESC);
CREATE INDEX payouts_split ON payouts (split_id, leg_index) WHERE split_id IS NOT NULL;
CREATE INDEX payouts_charge ON payouts (charge_id) WHERE charge_id IS NOT NULL;

-- A succeeded payout is final: nothing moves it back.
-- +goose StatementBegin
CREATE FUNCTION payouts_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'payouts are never deleted (%)', OLD.id USING ERRCODE = 'raise_exception';
    END IF;
    IF OLD.status = 'succeeded' AND NEW.status <> 'succeeded' THEN
        RAISE EXCEPTION 'payout % succeeded; status is final', OLD.id USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.amount <> OLD.amount OR NEW.currency <> OLD.currency OR NEW.merchant_id <> OLD.merchant_id
       OR NEW.kind <> OLD.kind THEN
        RAISE EXCEPTION 'payout % amount, currency, merchant and kind are immutable', OLD.id
            USING ERRCODE = 'raise_exception';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER payouts_guard BEFORE UPDATE OR DELETE ON payouts
    FOR EACH ROW EXECUTE FUNCTION payouts_guard();

-- +goose Up
-- Incoming money: card and Pix charges. A charge is the intent; its attempts
-- (package attempts, kinds card_charge and pix_charge, subject_id =
-- charges.id) are each conversation with the provider. When a charge is paid
-- ONE ledger transaction (cause_kind 'charge_credit', cause_id = charges.id)
-- debits the provider's clearing account with the gross amount and credits
-- the merchant (net), the platform's fees and the split recipients.

-- Fee rules: percent of the gross plus a fixed amount in the currency. A row
-- with merchant_id NULL is the platform's default for that currency.
CREATE TABLE charge_fee_rules (
    merchant_id  text REFERENCES merchants (id),
    currency     text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    percent      numeric(9, 4) NOT NULL CHECK (percent >= 0 AND percent <= 100),
    fixed        numeric(30, 8) NOT NULL CHECK (fixed >= 0),
    updated_at   timestamptz NOT NULL
);
CREATE UNIQUE INDEX charge_fee_rules_key ON charge_fee_rules (coalesce(merchant_id, ''), currency);

-- Caller-side idempotency of creation: one row per (merchant, client key)
-- with the sha256 of the request and the charge it created.
CREATE TABLE charge_requests (
    merchant_id   text NOT NULL REFERENCES merchants (id),
    client_key    text NOT NULL CHECK (length(client_key) BETWEEN 1 AND 255),
    request_hash  bytea NOT NULL CHECK (octet_length(request_hash) = 32),
    charge_id     text NOT NULL,
    created_at    timestamptz NOT NULL,
    PRIMARY KEY (merchant_id, client_key)
);

CREATE TABLE charges (
    id               text PRIMARY KEY CHECK (id ~ '^ch_[0-9a-f]{32}$'),
    merchant_id      text NOT NULL REFERENCES merchants (id),
    kind             text NOT NULL CHECK (kind IN ('card', 'pix')),
    provider         text NOT NULL,
    amount           numeric(30, 8) NOT NULL CHECK (amount > 0),
    currency         text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
    -- The fee rule applied at creation and what it gave; merchant_net is
    -- what the merchant keeps after fee and splits (the rounding remainder
    -- included). fee + merchant_net + sum(charge_splits.amount) = amount.
    fee_percent      numeric(9, 4) NOT NULL,
    fee_fixed        numeric(30, 8) NOT NULL,
    fee              numeric(30, 8) NOT NULL CHECK (fee >= 0 AND fee <= amount),
    merchant_net     numeric(30, 8) NOT NULL CHECK (merchant_net >= 0),
    description      text,
    metadata         jsonb NOT NULL DEFAULT '{}',
    pix_expires_in   integer CHECK (pix_expires_in > 0),
    -- processing: the attempt is open (pending or unknown); awaiting_payment:
    -- the Pix cob exists and waits for the payer (its attempt is still open);
    -- paid: money captured or received and credited (attempt succeeded);
    -- failed: declined / not created; expired: the cob expired unpaid.
    status           text NOT NULL CHECK (status IN ('processing', 'awaiting_payment', 'paid', 'failed', 'expired')),
    failure_code     text,
    failure_reason   text,
    attempt_id       uuid REFERENCES attempts (id),
    reference        text,
    provider_id      text,
    pix_copy_paste   text,
    pix_location     text,
    pix_expires_at   timestamptz,
    paid_at          timestamptz,
    paid_by          text,
    credit_tx_id     bigint REFERENCES ledger_transactions (id),
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    CHECK ((kind = 'pix') = (pix_expires_in IS NOT NULL)),
    CHECK (kind = 'pix' OR status <> 'awaiting_payment'),
    CHECK (kind = 'pix' OR status <> 'expired'),
    CHECK ((status = 'paid') = (credit_tx_id IS NOT NULL)),
    CHECK ((status = 'paid') = (paid_at IS NOT NULL))
);
CREATE INDEX charges_merchant ON charges (merchant_id, created_at DESC, id DESC);
CREATE UNIQUE INDEX charges_reference ON charges (reference) WHERE reference IS NOT NULL;
CREATE INDEX charges_awaiting ON charges (pix_expires_at) WHERE status = 'awaiting_payment';

-- Split rules given at creation, with the amount each gave.
CREATE TABLE charge_splits (
    charge_id     text NOT NULL REFERENCES charges (id),
    idx           integer NOT NULL CHECK (idx >= 0),
    recipient_id  text NOT NULL REFERENCES merchants (id),
    percent       numeric(9, 4) CHECK (percent > 0 AND percent <= 100),
    fixed         numeric(30, 8) CHECK (fixed > 0),
    amount        numeric(30, 8) NOT NULL CHECK (amount >= 0),
    PRIMARY KEY (charge_id, idx),
    UNIQUE (charge_id, recipient_id),
    CHECK ((percent IS NULL) <> (fixed IS NULL))
);

-- Final statuses never change; money fields are immutable; nothing is deleted.
-- +goose StatementBegin
CREATE FUNCTION charges_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'charges are never deleted (%)', OLD.id USING ERRCODE = 'raise_exception';
    END IF;
    IF NEW.amount <> OLD.amount OR NEW.currency <> OLD.currency OR NEW.merchant_id <> OLD.merchant_id
       OR NEW.kind <> OLD.kind OR NEW.fee <> OLD.fee OR NEW.merchant_net <> OLD.merchant_net
       OR NEW.provider <> OLD.provider THEN
        RAISE EXCEPTION 'charge % amount, currency, merchant, kind, provider and fee are immutable', OLD.id
            USING ERRCODE = 'raise_exception';
    END IF;
    IF NEW.status <> OLD.status AND NOT (
           (OLD.status = 'processing' AND NEW.status IN ('awaiting_payment', 'paid', 'failed', 'expired'))
        OR (OLD.status = 'awaiting_payment' AND NEW.status IN ('paid', 'expired', 'failed'))) THEN
        RAISE EXCEPTION 'charge % transition % -> % is not allowed', OLD.id, OLD.status, NEW.status
            USING ERRCODE = 'check_violation';
    END IF;
    IF OLD.credit_tx_id IS NOT NULL AND NEW.credit_tx_id IS DISTINCT FROM OLD.credit_tx_id THEN
        RAISE EXCEPTION 'charge % credit transaction is immutable', OLD.id USING ERRCODE = 'raise_exception';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER charges_guard BEFORE UPDATE OR DELETE ON charges
    FOR EACH ROW EXECUTE FUNCTION charges_guard();

-- +goose StatementBegin
CREATE FUNCTION charge_splits_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'charge_splits is append-only (% refused)', TG_OP USING ERRCODE = 'raise_exception';
END
$$;
-- +goose StatementEnd
CREATE TRIGGER charge_splits_append_only BEFORE UPDATE OR DELETE ON charge_splits
    FOR EACH ROW EXECUTE FUNCTION charge_splits_append_only();

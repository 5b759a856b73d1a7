-- +goose Up
-- Merchants own balances, payouts and charges. Ids are stable, readable text
-- (e.g. "m_42") so ledger account codes stay readable: merchant/m_42/available/BRL.
CREATE TABLE merchants (
    id          text PRIMARY KEY CHECK (id ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    name        text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    created_at  timestamptz NOT NULL DEFAULT now()
);

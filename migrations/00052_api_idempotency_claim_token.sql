-- +goose Up
-- Each claim of an Idempotency-Key carries a random token: the request that
-- claimed it (or took it over after its lease) releases or completes the
-- row only while the token is still its own. Without it, a request that
-- outlived its lease and then failed deleted the claim of the retry that
-- had taken the key over, and a third request ran beside the retry. NULL on
-- rows claimed before this migration. A nullable column without a default:
-- no rewrite.
ALTER TABLE idempotent_requests ADD COLUMN claim_token text;

-- +goose Down
ALTER TABLE idempotent_requests DROP COLUMN claim_token;

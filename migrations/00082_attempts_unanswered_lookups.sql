-- +goose Up
-- A lookup the provider did not answer (a transport error, a 5xx, a 429, an
-- unreadable body) proves nothing about the operation, and it no longer
-- moves the attempt along the resolve schedule: the schedule's step is the
-- number of answered lookups (lookup_count - lookups_unanswered), and an
-- unanswered lookup is tried again after the same step's delay (or the
-- provider's Retry-After when longer). unanswered_since is when the current
-- run of unanswered lookups began (NULL after an answered one): an attempt
-- whose lookups have gone unanswered for a day goes to review (R18).
--
-- The columns come with constant defaults (no rewrite) and the checks NOT
-- VALID: every existing row holds 0 and NULL, and validating here would
-- scan the whole attempts table under this statement's ACCESS EXCLUSIVE
-- lock, stopping every payout for as long as the scan takes. The checks
-- hold for every row written from now on; 00083 validates the old rows
-- without blocking writes.
ALTER TABLE attempts
    ADD COLUMN lookups_unanswered integer NOT NULL DEFAULT 0,
    ADD COLUMN unanswered_since timestamptz,
    ADD CONSTRAINT attempts_lookups_unanswered CHECK (lookups_unanswered BETWEEN 0 AND lookup_count) NOT VALID,
    ADD CONSTRAINT attempts_unanswered_since CHECK (unanswered_since IS NULL OR lookups_unanswered > 0) NOT VALID;

-- +goose Down
ALTER TABLE attempts DROP COLUMN unanswered_since, DROP COLUMN lookups_unanswered;

-- +goose Up
-- A lookup the provider did not answer (a transport error, a 5xx, a 429, an
-- unreadable body) proves nothing about the operation, and it no longer
-- moves the attempt along the resolve schedule: the schedule's step is the
-- number of answered lookups (lookup_count - lookups_unanswered), and an
-- unanswered lookup is tried again after the same step's delay (or the
-- provider's Retry-After when longer). unanswered_since is when the current
-- run of unanswered lookups began (NULL after an answered one): an attempt
-- whose lookups have gone unanswered for a day goes to review (R18).
ALTER TABLE attempts
    ADD COLUMN lookups_unanswered integer NOT NULL DEFAULT 0 CHECK (lookups_unanswered >= 0),
    ADD COLUMN unanswered_since timestamptz,
    ADD CHECK (lookups_unanswered <= lookup_count),
    ADD CHECK (unanswered_since IS NULL OR lookups_unanswered > 0);

-- +goose Down
ALTER TABLE attempts DROP COLUMN unanswered_since, DROP COLUMN lookups_unanswered;

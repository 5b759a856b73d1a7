-- +goose Up
-- R18: an attempt the provider reports "processing" reaches review when it
-- is late, not when a counter says so.
--
-- lookups_processing counts the answered lookups that found the operation
-- processing. They still move the attempt along the resolve schedule (its
-- step is lookup_count - lookups_unanswered, so a day-long Pix cob is
-- looked up every 30 min, not every 30 s), but MaxLookups bounds only the
-- answered lookups that could not tell (lookup_count - lookups_unanswered
-- - lookups_processing): a provider that keeps saying "processing" is
-- bounded by its deadline below instead.
--
-- processing_expected_by is when the provider said it expects the
-- operation to end (a Stripe payout's arrival date, a Pix cob's expiry plus
-- the adapter's grace), capped by the attempts core at processing_since +
-- 30 days: a processing attempt goes to review once both processing_since
-- + ProcessingReviewAfter and processing_expected_by + the margin
-- (ProcessingExpectedMargin) have passed. NULL: the provider stated none.
--
-- Constant defaults (no rewrite). The check is NOT VALID so that this
-- statement does not scan the attempts table under its ACCESS EXCLUSIVE
-- lock; every existing row holds 0, which satisfies it, and it is enforced
-- on every row written from now on.
ALTER TABLE attempts
    ADD COLUMN lookups_processing integer NOT NULL DEFAULT 0,
    ADD COLUMN processing_expected_by timestamptz,
    ADD CONSTRAINT attempts_lookups_processing
        CHECK (lookups_processing BETWEEN 0 AND lookup_count - lookups_unanswered) NOT VALID;

-- +goose Down
ALTER TABLE attempts DROP COLUMN processing_expected_by, DROP COLUMN lookups_processing;

-- +goose NO TRANSACTION
-- +goose Up
-- Validates 00082's checks on the rows written before it (all 0 and NULL):
-- VALIDATE CONSTRAINT takes SHARE UPDATE EXCLUSIVE, so payouts keep being
-- written while it scans. Outside a transaction, so the scan does not hold
-- 00082's ACCESS EXCLUSIVE lock.
ALTER TABLE attempts VALIDATE CONSTRAINT attempts_lookups_unanswered;
ALTER TABLE attempts VALIDATE CONSTRAINT attempts_unanswered_since;

-- +goose Down
SELECT 1;

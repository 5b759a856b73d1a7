-- +goose NO TRANSACTION
-- +goose Up
-- R9, R19: a dispute (a chargeback) of a second operation. When a provider
-- reports another operation under the reference of an attempt that
-- already succeeded as its own (a card charged twice under our reference),
-- the attempt's note keeps that operation's provider id in its evidence
-- (second_provider_id), and no attempt holds it. A dispute of that second
-- payment (charge.dispute.*, attempts.RecordDispute) names it alone: the
-- incoming attempt whose note names it is found through this index, and
-- the dispute is noted there for the operator handling the double charge.
--
-- Partial: only the notes that name a second operation are in it (one or
-- two per double payment), so each of the events every payout writes (3
-- or more) costs one predicate check and no index entry. CONCURRENTLY,
-- outside a transaction: attempt_events keeps being written while the
-- index is built (a plain CREATE INDEX holds SHARE on it, stopping every
-- attempt's events for the whole scan). Concurrent `saldo migrate` runs
-- wait for the migration lock without holding a snapshot (lockPolling),
-- which the build would otherwise wait for while they wait for it.
-- A build that failed part way leaves an INVALID index: goose did not
-- record the file as applied, so the next run drops it first and builds
-- it again.
DROP INDEX CONCURRENTLY IF EXISTS attempt_events_second_provider_id;
CREATE INDEX CONCURRENTLY attempt_events_second_provider_id
    ON attempt_events ((evidence->>'second_provider_id'))
    WHERE type = 'note' AND (evidence->>'second_provider_id') IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS attempt_events_second_provider_id;

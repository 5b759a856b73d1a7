-- +goose Up
-- The attempts guard runs only when an UPDATE would break a rule, and the
-- call-start update can be a HOT update (issue 5, performance).
--
-- attempts_guard (00020) is a plpgsql BEFORE UPDATE trigger: calling it for
-- every row of every update cost a PL/pgSQL call per row (the group-commit
-- statements update tens of rows at once). The trigger now carries the same
-- conditions in its WHEN clause, evaluated without entering PL/pgSQL, and
-- the function (unchanged) runs only to raise the error. DELETE keeps its
-- own trigger: attempts are never deleted.
--
-- attempts_open indexed call_started_at, which every call-start mark
-- changes, so that update could never be HOT (it wrote every index of the
-- table). The only reader that filtered on it, the sweeper's stale-call
-- query, walks the open attempts (status prefix) either way; the index now
-- orders them by created_at. fillfactor leaves room on each page for the
-- updated versions.
DROP TRIGGER attempts_guard ON attempts;
CREATE TRIGGER attempts_guard_delete BEFORE DELETE ON attempts
    FOR EACH ROW EXECUTE FUNCTION attempts_guard();
CREATE TRIGGER attempts_guard BEFORE UPDATE ON attempts
    FOR EACH ROW
    WHEN (NEW.id <> OLD.id OR NEW.kind <> OLD.kind OR NEW.subject_id <> OLD.subject_id
       OR NEW.provider <> OLD.provider OR NEW.operation <> OLD.operation
       OR NEW.idempotency_key <> OLD.idempotency_key OR NEW.reference <> OLD.reference
       OR NEW.payload <> OLD.payload OR NEW.payload_sha256 <> OLD.payload_sha256
       OR NEW.created_at <> OLD.created_at
       OR (OLD.provider_id IS NOT NULL AND NEW.provider_id IS DISTINCT FROM OLD.provider_id)
       OR NEW.call_count < OLD.call_count OR NEW.calls_recorded < OLD.calls_recorded
       OR (NEW.status <> OLD.status AND NOT (
              (OLD.status = 'pending' AND NEW.status IN ('succeeded', 'failed', 'unknown'))
           OR (OLD.status = 'unknown' AND NEW.status IN ('succeeded', 'failed')))))
    EXECUTE FUNCTION attempts_guard();

DROP INDEX attempts_open;
CREATE INDEX attempts_open ON attempts (status, created_at) WHERE status IN ('pending', 'unknown');
ALTER TABLE attempts SET (fillfactor = 70);

-- +goose Down
ALTER TABLE attempts RESET (fillfactor);
DROP INDEX attempts_open;
CREATE INDEX attempts_open ON attempts (status, call_started_at) WHERE status IN ('pending', 'unknown');
DROP TRIGGER attempts_guard ON attempts;
DROP TRIGGER attempts_guard_delete ON attempts;
CREATE TRIGGER attempts_guard BEFORE UPDATE OR DELETE ON attempts
    FOR EACH ROW EXECUTE FUNCTION attempts_guard();

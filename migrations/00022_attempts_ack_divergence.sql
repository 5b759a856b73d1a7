-- +goose Up
-- Issue 13, findings 2 and 5 (R16, R18, R19).
--
-- acknowledged_at / acknowledgement: the first time the provider showed it
-- holds the operation (a 2xx, a provider id, a 409 "key in use", a
-- processing report) and what it said. An acknowledgement is kept whatever
-- status the call's answer leads to (an unreadable 2xx is unknown, but it
-- is still the provider's word that it took the request): after it, a
-- lookup's "not found" proves nothing and never fails the attempt.
--
-- diverged_at / divergence: a provider reported the operation succeeded
-- after the attempt was resolved failed (the reserve went back while money
-- left). The final status never changes (R9); the attempt is flagged for
-- review and `saldo audit verify` reports it until a human settles it.
--
-- Both are evidence: once written they never change or go away.
ALTER TABLE attempts
    ADD COLUMN acknowledged_at timestamptz,
    ADD COLUMN acknowledgement text CHECK (length(acknowledgement) <= 2000),
    ADD COLUMN diverged_at timestamptz,
    ADD COLUMN divergence text CHECK (length(divergence) <= 2000),
    ADD CHECK ((acknowledged_at IS NULL) = (acknowledgement IS NULL)),
    ADD CHECK ((diverged_at IS NULL) = (divergence IS NULL)),
    ADD CHECK (diverged_at IS NULL OR status = 'failed');

-- +goose StatementBegin
CREATE FUNCTION attempts_evidence_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'attempt % acknowledgement and divergence are never changed once recorded', OLD.id
        USING ERRCODE = 'raise_exception';
END
$$;
-- +goose StatementEnd

CREATE TRIGGER attempts_evidence_guard BEFORE UPDATE ON attempts
    FOR EACH ROW
    WHEN ((OLD.acknowledged_at IS NOT NULL AND (NEW.acknowledged_at IS DISTINCT FROM OLD.acknowledged_at
            OR NEW.acknowledgement IS DISTINCT FROM OLD.acknowledgement))
       OR (OLD.diverged_at IS NOT NULL AND (NEW.diverged_at IS DISTINCT FROM OLD.diverged_at
            OR NEW.divergence IS DISTINCT FROM OLD.divergence)))
    EXECUTE FUNCTION attempts_evidence_guard();

-- The review queue also lists final attempts the provider contradicts.
CREATE INDEX attempts_diverged ON attempts (review_at, id) WHERE diverged_at IS NOT NULL;

-- +goose Down
DROP INDEX attempts_diverged;
DROP TRIGGER attempts_evidence_guard ON attempts;
DROP FUNCTION attempts_evidence_guard();
ALTER TABLE attempts DROP COLUMN divergence, DROP COLUMN diverged_at,
    DROP COLUMN acknowledgement, DROP COLUMN acknowledged_at;

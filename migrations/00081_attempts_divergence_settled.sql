-- +goose Up
-- A divergence (a provider success after the attempt was resolved failed,
-- migration 00022) stays on the attempt as evidence for good; once a human
-- has booked what happened (with the merchant, in the ledger), they settle
-- it with a reason: the audit, the review queue and the payout's
-- needs_attention then leave it alone. A settlement, like the evidence,
-- never changes once recorded.
ALTER TABLE attempts
    ADD COLUMN divergence_settled_at timestamptz,
    ADD COLUMN divergence_settled_by text CHECK (length(divergence_settled_by) BETWEEN 1 AND 200),
    ADD COLUMN divergence_settlement text CHECK (length(divergence_settlement) BETWEEN 1 AND 2000),
    ADD CHECK ((divergence_settled_at IS NULL) = (divergence_settled_by IS NULL)
        AND (divergence_settled_at IS NULL) = (divergence_settlement IS NULL)),
    ADD CHECK (divergence_settled_at IS NULL OR diverged_at IS NOT NULL);

CREATE TRIGGER attempts_settlement_guard BEFORE UPDATE ON attempts
    FOR EACH ROW
    WHEN (OLD.divergence_settled_at IS NOT NULL AND (NEW.divergence_settled_at IS DISTINCT FROM OLD.divergence_settled_at
        OR NEW.divergence_settled_by IS DISTINCT FROM OLD.divergence_settled_by
        OR NEW.divergence_settlement IS DISTINCT FROM OLD.divergence_settlement))
    EXECUTE FUNCTION attempts_evidence_guard();

DROP INDEX attempts_diverged;
CREATE INDEX attempts_diverged ON attempts (review_at, id) WHERE diverged_at IS NOT NULL AND divergence_settled_at IS NULL;

-- +goose Down
DROP INDEX attempts_diverged;
CREATE INDEX attempts_diverged ON attempts (review_at, id) WHERE diverged_at IS NOT NULL;
DROP TRIGGER attempts_settlement_guard ON attempts;
ALTER TABLE attempts DROP COLUMN divergence_settlement, DROP COLUMN divergence_settled_by,
    DROP COLUMN divergence_settled_at;

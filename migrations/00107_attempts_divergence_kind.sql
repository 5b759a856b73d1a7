-- +goose Up
-- R9, R19: which way a provider contradicted a final attempt. Until now the
-- kind of a divergence was read from the attempt's status: failed means
-- the provider reported it paid after all (paid_after_failure), succeeded
-- means it reported it failed after all (reversal). A card dispute (a
-- chargeback: the card network takes a paid charge's money back from the
-- platform's balance, and may give it back if the merchant wins) is a
-- third kind on a succeeded attempt: the same review, needs_attention and
-- settlement by a human, but the merchant and the operator must tell it
-- from a reversal (the money may come back; Stripe refuses refunds of a
-- disputed charge with charge_disputed). Status alone cannot say it, so
-- the kind is kept with the evidence, and like the evidence it never
-- changes once recorded.
ALTER TABLE attempts ADD COLUMN divergence_kind text;

UPDATE attempts SET divergence_kind = CASE status WHEN 'failed' THEN 'paid_after_failure' ELSE 'reversal' END
    WHERE diverged_at IS NOT NULL;

-- A writer that records a divergence without naming its kind (code older
-- than this migration during a rolling deploy) gets the kind its status
-- always meant.
-- +goose StatementBegin
CREATE FUNCTION attempts_divergence_kind_default() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.diverged_at IS NOT NULL AND NEW.divergence_kind IS NULL THEN
        NEW.divergence_kind := CASE NEW.status WHEN 'failed' THEN 'paid_after_failure' ELSE 'reversal' END;
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER attempts_divergence_kind_default BEFORE INSERT OR UPDATE ON attempts
    FOR EACH ROW
    WHEN (NEW.diverged_at IS NOT NULL AND NEW.divergence_kind IS NULL)
    EXECUTE FUNCTION attempts_divergence_kind_default();

-- The kind is evidence: never changed once recorded (00022's guard).
CREATE TRIGGER attempts_divergence_kind_guard BEFORE UPDATE ON attempts
    FOR EACH ROW
    WHEN (OLD.divergence_kind IS NOT NULL AND NEW.divergence_kind IS DISTINCT FROM OLD.divergence_kind)
    EXECUTE FUNCTION attempts_evidence_guard();

-- The existing rows were backfilled above; NOT VALID spares a second scan
-- of attempts under ACCESS EXCLUSIVE, and every row written is checked.
ALTER TABLE attempts
    ADD CONSTRAINT attempts_divergence_kind
        CHECK (divergence_kind IN ('paid_after_failure', 'reversal', 'dispute')) NOT VALID,
    ADD CONSTRAINT attempts_divergence_kind_present
        CHECK ((diverged_at IS NULL) = (divergence_kind IS NULL)) NOT VALID,
    -- A success after failed is only ever paid_after_failure; a reversal
    -- and a dispute contradict a succeeded attempt.
    ADD CONSTRAINT attempts_divergence_kind_status
        CHECK (divergence_kind IS NULL OR (divergence_kind = 'paid_after_failure') = (status = 'failed')) NOT VALID;

-- +goose Down
ALTER TABLE attempts DROP CONSTRAINT attempts_divergence_kind_status,
    DROP CONSTRAINT attempts_divergence_kind_present, DROP CONSTRAINT attempts_divergence_kind;
DROP TRIGGER attempts_divergence_kind_guard ON attempts;
DROP TRIGGER attempts_divergence_kind_default ON attempts;
DROP FUNCTION attempts_divergence_kind_default();
ALTER TABLE attempts DROP COLUMN divergence_kind;

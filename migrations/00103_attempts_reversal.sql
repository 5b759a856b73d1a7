-- +goose Up
-- A reversal is a divergence too (R9, R19, R22). Until now only a success
-- reported after the attempt was resolved failed was recorded as one
-- (00022): the reserve went back while money left. The other way round, a
-- provider reporting "failed" after the attempt succeeded (a payout the
-- bank returned, a transfer reversed in full, a refund that failed late, a
-- card charge that did not settle), the ledger shows money moved that came
-- back or never arrived. It was only a note and an ERROR log: no review
-- queue, no audit finding, nothing the merchant could see. It is now
-- recorded the same way (diverged_at, divergence), on a succeeded attempt:
-- the status stays final (R9) and nothing moves until a human books it and
-- settles the divergence.
-- +goose StatementBegin
DO $$
DECLARE c name;
BEGIN
    SELECT conname INTO c FROM pg_constraint
        WHERE conrelid = 'attempts'::regclass AND contype = 'c'
          AND pg_get_constraintdef(oid) = 'CHECK (((diverged_at IS NULL) OR (status = ''failed''::text)))';
    IF c IS NULL THEN
        RAISE EXCEPTION 'attempts: the divergence status check of 00022 was not found';
    END IF;
    EXECUTE format('ALTER TABLE attempts DROP CONSTRAINT %I', c);
END
$$;
-- +goose StatementEnd
ALTER TABLE attempts ADD CONSTRAINT attempts_divergence_final
    CHECK (diverged_at IS NULL OR status IN ('failed', 'succeeded'));

-- +goose Down
ALTER TABLE attempts DROP CONSTRAINT attempts_divergence_final;
ALTER TABLE attempts ADD CHECK (diverged_at IS NULL OR status = 'failed');

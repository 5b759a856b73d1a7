-- +goose Up
-- R9, R19: a second operation is a divergence. A provider report of
-- another operation succeeded under the reference of an attempt that
-- already succeeded as its own (a cob paid twice by the payer, a transfer
-- made twice) was only a note: someone was paid or charged twice and no
-- human was asked to act. It is now recorded like a reversal, on the
-- succeeded attempt: review, needs_attention, *.diverged, the audit
-- reporting it until an operator books the return and settles it. Its
-- kind is kept with the evidence in divergence_kind (00107, which also
-- keeps it from changing once recorded); this adds the kind to the list.
-- NOT VALID: every existing row holds one of the earlier kinds, and a
-- second scan of attempts under ACCESS EXCLUSIVE is spared; every row
-- written is checked.
ALTER TABLE attempts DROP CONSTRAINT attempts_divergence_kind;
ALTER TABLE attempts ADD CONSTRAINT attempts_divergence_kind
    CHECK (divergence_kind IN ('paid_after_failure', 'reversal', 'dispute', 'second_operation')) NOT VALID;

-- +goose Down
ALTER TABLE attempts DROP CONSTRAINT attempts_divergence_kind;
ALTER TABLE attempts ADD CONSTRAINT attempts_divergence_kind
    CHECK (divergence_kind IN ('paid_after_failure', 'reversal', 'dispute')) NOT VALID;

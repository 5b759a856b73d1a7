-- +goose Up
-- R19: a statement line saldo cannot read (text PostgreSQL cannot store:
-- NUL or invalid UTF-8, or a currency that is not one saldo knows) is
-- reported on its own as an unreadable_line divergence (critical: the line
-- may say money moved, and saldo cannot tie it to an attempt), and the
-- other lines of the day are reconciled. One such line used to fail the
-- whole run, on every retry. This adds the kind to the list.
-- NOT VALID: every existing row holds one of the earlier kinds; every row
-- written is checked.
ALTER TABLE reconcile_divergences DROP CONSTRAINT reconcile_divergences_kind_check;
ALTER TABLE reconcile_divergences ADD CONSTRAINT reconcile_divergences_kind_check
    CHECK (kind IN ('resolved_by_reconciliation', 'paid_but_failed', 'unknown_to_us', 'double_payment',
        'missing_at_provider', 'amount_mismatch', 'ledger_totals', 'stale_open', 'unreadable_line')) NOT VALID;

-- +goose Down
ALTER TABLE reconcile_divergences DROP CONSTRAINT reconcile_divergences_kind_check;
ALTER TABLE reconcile_divergences ADD CONSTRAINT reconcile_divergences_kind_check
    CHECK (kind IN ('resolved_by_reconciliation', 'paid_but_failed', 'unknown_to_us', 'double_payment',
        'missing_at_provider', 'amount_mismatch', 'ledger_totals', 'stale_open')) NOT VALID;

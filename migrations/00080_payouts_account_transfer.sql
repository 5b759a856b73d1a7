-- +goose Up
-- Issue 14: a payout or split leg may be a Stripe Connect transfer to a
-- connected account (operation account_transfer).
ALTER TABLE payouts DROP CONSTRAINT payouts_operation_check;
ALTER TABLE payouts ADD CONSTRAINT payouts_operation_check
    CHECK (operation IN ('bank_payout', 'pix_transfer', 'refund', 'account_transfer'));

-- +goose Down
ALTER TABLE payouts DROP CONSTRAINT payouts_operation_check;
ALTER TABLE payouts ADD CONSTRAINT payouts_operation_check
    CHECK (operation IN ('bank_payout', 'pix_transfer', 'refund'));

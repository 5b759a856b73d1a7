-- +goose Up
-- R11, R16, R22: the instant a call in flight is over, stamped by the
-- process that made it, with its own StaleCallAfter (its call's context
-- ends a second before). Every other process (the sweeper, a resolver's
-- "not found", an operator's manual failure) waits for the later of this
-- instant and its own StaleCallAfter: a process configured with a shorter
-- one no longer counts another's call over while it is still on its way
-- (a payout was paid twice by a fleet with two settings; found by review).
-- NULL on calls marked before this column: their StaleCallAfter is the
-- reader's, as before.
ALTER TABLE attempts ADD COLUMN call_deadline_at timestamptz;

-- +goose Down
ALTER TABLE attempts DROP COLUMN call_deadline_at;

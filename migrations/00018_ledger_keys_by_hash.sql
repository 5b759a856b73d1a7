-- +goose Up
-- Idempotency keys are kept unique by a hash index (issue 19: bytes per
-- transfer).
--
-- The UNIQUE constraint's B-tree held every key's whole text: 78 bytes per
-- transfer for the bench's 27-character keys (keys arrive in no order, so
-- its pages split half full), the largest index of the ledger after the
-- postings' primary key. Nothing reads keys in order or by prefix: the
-- ledger looks a key up by equality only (a replay, ledger_post_batch's
-- check that a batch's keys are new, ledger.TransactionByKey). A hash
-- index stores a 4-byte hash code per row: 27 bytes per transfer on the
-- same ledger, the same probe by equality.
--
-- PostgreSQL's hash indexes cannot be UNIQUE; an exclusion constraint with
-- the = operator over one is the same rule, under the same name, enforced
-- by the database whoever inserts. Two differences, both handled:
--
--   * ON CONFLICT must name the constraint: ledger_post's
--     "ON CONFLICT (idempotency_key) DO NOTHING" infers unique indexes
--     only. It becomes "ON CONFLICT ON CONSTRAINT
--     ledger_transactions_idempotency_key DO NOTHING", with the same
--     meaning: a replay, or a concurrent twin that committed first (the
--     insert waits for it), yields no row, and ledger_post reports the key
--     as existing or conflicting.
--   * A plain INSERT of a key that a concurrent transaction is inserting
--     fails with exclusion_violation (23P01) once the other commits, or,
--     when both inserted before either checked, one of them with a
--     deadlock (40P01) after deadlock_timeout, where the B-tree gave
--     unique_violation. Only ledger_post_batch inserts that way, after
--     checking the keys are new; any error rolls its batch back and
--     ledger.Poster posts each transfer on its own with ledger_post, where
--     a key that did commit is a replay.
--
-- ledger_post is otherwise the function of 00013 (with 00016's SET
-- clauses): it is rewritten from its stored definition with that one
-- replacement, and the migration refuses to go on if the text it replaces
-- is not found exactly once.
--
-- Building the constraint takes an ACCESS EXCLUSIVE lock on
-- ledger_transactions while the hash index is built and every key is
-- checked against it: `saldo migrate` applied this file and 00019 to a
-- ledger of 5.2 million transactions in 25.8 s on the 2-core bench machine
-- (the hash index alone builds in 8.5 s). Plan it as downtime for writers
-- on a large ledger. Re-runnable: this file is numbered in the
-- ledger's range, so databases migrated before it existed apply it after
-- later files (migrations.Up allows that order).

-- +goose StatementBegin
DO $$
DECLARE
    v_def text;
    v_old constant text := 'ON CONFLICT (idempotency_key) DO NOTHING';
    v_new constant text := 'ON CONFLICT ON CONSTRAINT ledger_transactions_idempotency_key DO NOTHING';
BEGIN
    IF EXISTS (SELECT 1 FROM pg_constraint
               WHERE conrelid = 'ledger_transactions'::regclass
                 AND conname = 'ledger_transactions_idempotency_key' AND contype = 'u') THEN
        ALTER TABLE ledger_transactions DROP CONSTRAINT ledger_transactions_idempotency_key;
        ALTER TABLE ledger_transactions ADD CONSTRAINT ledger_transactions_idempotency_key
            EXCLUDE USING hash (idempotency_key WITH =);
    END IF;

    v_def := pg_get_functiondef('ledger_post(text, text, text, text, jsonb, timestamptz, bigint, bigint[], text[], numeric[], text[])'::regprocedure);
    IF position(v_new IN v_def) > 0 THEN
        RETURN;
    END IF;
    IF (length(v_def) - length(replace(v_def, v_old, ''))) / length(v_old) <> 1 THEN
        RAISE EXCEPTION 'migration 00018: ledger_post does not hold "%" exactly once; its definition changed since 00013', v_old;
    END IF;
    EXECUTE replace(v_def, v_old, v_new);
END
$$;
-- +goose StatementEnd

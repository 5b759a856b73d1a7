-- +goose Up
-- Double entry is checked at the end of the statement that writes a
-- transaction, set-based, instead of once per transaction at COMMIT
-- (issue 19). Same rules, same refusals, same constraint names
-- (ledger.MapCommitError); only the moment changes, and it is earlier:
--
--   * ledger_transactions_checked (after each INSERT statement on
--     ledger_transactions, over the rows it inserted): every new
--     transaction's fields are valid, and it has postings by the end of
--     the statement that inserts it. A transaction row is therefore written
--     in the same statement as its postings (ledger_post and
--     ledger_post_batch always did: one WITH statement); one written alone
--     is refused at once, where it used to wait for COMMIT;
--   * ledger_postings_checked (after each INSERT statement on
--     ledger_postings, over the rows it inserted): every transaction the
--     statement added postings to exists and is whole with all its
--     postings: accounts exist in the posting's currency, sequence numbers
--     from 1, non-zero amounts, legs 1..n, at least two postings summing to
--     zero per currency. This covers the postings written with their
--     transaction and any posting added later, to a transaction of this
--     database transaction or of one committed long ago.
--
-- Why: the deferred per-row trigger fired once per transaction at COMMIT,
-- each firing a PL/pgSQL call and a query. It was about a fifth of
-- ledger.Post's server time and, for ledger.Poster, one firing per
-- transfer of the batch. Now a statement costs two trigger calls, the
-- same for a single ledger_post as for a batch of 64 transfers.
--
-- Re-runnable (IF EXISTS, OR REPLACE): this file is numbered in the
-- ledger's range, so databases migrated before it existed apply it after
-- later files (migrations.Up allows that order).

-- Every new transaction of the statement: valid fields and at least one
-- posting (ledger_postings_checked, fired by the same statement, checks
-- those postings whole). Raises the first rule broken.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_check_new_transactions() RETURNS trigger LANGUAGE plpgsql
SET enable_seqscan = off SET jit = off AS $$
DECLARE
    v_id bigint;
    v_valid boolean;
BEGIN
    -- A correlated EXISTS per row: one probe of ledger_postings_leg each
    -- (the planner cannot know the transition table's size).
    SELECT t.id, (length(t.idempotency_key) BETWEEN 1 AND 255
                  AND t.cause_kind ~ '^[a-z][a-z0-9_]{0,39}$'
                  AND length(t.cause_id) BETWEEN 1 AND 255
                  AND length(t.description) <= 1000)
    INTO v_id, v_valid
    FROM ledger_new_transactions t
    WHERE NOT (length(t.idempotency_key) BETWEEN 1 AND 255
               AND t.cause_kind ~ '^[a-z][a-z0-9_]{0,39}$'
               AND length(t.cause_id) BETWEEN 1 AND 255
               AND length(t.description) <= 1000)
       OR NOT EXISTS (SELECT 1 FROM ledger_postings p WHERE p.transaction_id = t.id)
    LIMIT 1;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF NOT v_valid THEN
        RAISE EXCEPTION 'ledger: transaction % is invalid (idempotency key 1-255 characters, cause kind a lowercase word, cause id 1-255 characters, description at most 1000)', v_id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_transactions_valid';
    END IF;
    RAISE EXCEPTION 'ledger: transaction % is not balanced (0 postings: a transaction is written in the same statement as its postings)', v_id
        USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_transaction_balanced';
END
$$;
-- +goose StatementEnd

-- Every transaction the statement added postings to, whole. One query finds
-- the suspects: a missing transaction, or one whose postings do not pass
-- the single-currency test (one currency, sum zero, at least two, fields
-- and accounts valid); ledger_check_transaction then raises the precise
-- error for a suspect, or passes one that balances in several currencies.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_check_postings() RETURNS trigger LANGUAGE plpgsql
SET enable_seqscan = off SET jit = off AS $$
DECLARE
    v_tx bigint;
    v_exists boolean;
BEGIN
    -- Correlated subqueries and a LATERAL aggregate per distinct
    -- transaction: primary-key and ledger_postings_leg probes (a join let
    -- the planner, which cannot know the transition table's size, hash
    -- whole tables).
    FOR v_tx, v_exists IN
        SELECT n.tid, EXISTS (SELECT 1 FROM ledger_transactions t WHERE t.id = n.tid)
        FROM (SELECT DISTINCT np.transaction_id AS tid FROM ledger_new_postings np) n
        CROSS JOIN LATERAL (
            SELECT count(*) AS legs, sum(p.amount) AS total,
                   min(p.currency) = max(p.currency) AS single,
                   coalesce(bool_and(p.seq >= 1 AND p.amount <> 0
                                     AND EXISTS (SELECT 1 FROM ledger_accounts a
                                                 WHERE a.id = p.account_id AND a.currency = p.currency)), false)
                       AND min(p.leg) = 1 AND max(p.leg) = count(*) AS fields_ok
            FROM ledger_postings p
            WHERE p.transaction_id = n.tid) x
        WHERE NOT (x.legs >= 2 AND x.single AND x.total = 0 AND x.fields_ok)
           OR NOT EXISTS (SELECT 1 FROM ledger_transactions t WHERE t.id = n.tid)
    LOOP
        IF NOT v_exists THEN
            RAISE EXCEPTION 'ledger: posting for a missing transaction'
                USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'ledger_postings_transaction';
        END IF;
        PERFORM ledger_check_transaction(v_tx);
    END LOOP;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

DROP TRIGGER IF EXISTS ledger_transaction_balanced ON ledger_transactions;
DROP FUNCTION IF EXISTS ledger_check_balanced();
DROP TRIGGER IF EXISTS ledger_transactions_checked ON ledger_transactions;
CREATE TRIGGER ledger_transactions_checked AFTER INSERT ON ledger_transactions
    REFERENCING NEW TABLE AS ledger_new_transactions
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_check_new_transactions();
-- ledger_postings_checked (00014) keeps its definition; its function above
-- now checks every transaction it touches.

-- No JIT on the write path. On a large ledger the planner's estimates for
-- these statements (a posting count per transaction taken from stale
-- statistics, array parameters of unknown size) pass jit_above_cost, and
-- compiling them costs 100-300 ms per statement: measured on a ledger of
-- 1.2 million postings, a batch of 32 transfers took 330 ms instead of 3.
-- +goose StatementBegin
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
             WHERE p.proname IN ('ledger_post', 'ledger_post_batch', 'ledger_check_transaction')
               AND p.pronamespace = current_schema()::regnamespace
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET jit = off', f);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Up
-- The database's double-entry checks cost one trigger firing per
-- transaction instead of two (issue 19). Same rules, same refusals, same
-- error names (ledger.MapCommitError):
--
--   * a transaction inserted by a database transaction is checked whole at
--     its COMMIT by the deferred ledger_transaction_balanced, as before,
--     which now also checks its postings (account exists in the posting's
--     currency, sequence number from 1, non-zero amount, legs 1..n) in the
--     same single query: that is everything the per-posting deferred
--     trigger ledger_posting_checked did for it;
--   * a posting of any other transaction (one committed earlier, or one
--     that does not exist) is checked at the end of the statement that
--     inserts it, by ledger_postings_checked (a statement trigger, set-based
--     over the inserted rows): the transaction must exist and, with every
--     posting it has, still be whole and balanced.
--
-- ledger_post and ledger_post_batch insert a transaction and its postings
-- in one statement, so ledger_postings_checked finds nothing to do for them
-- beyond one primary-key probe per distinct transaction, and at COMMIT each
-- transaction costs one firing (was two: ledger_transaction_balanced and
-- ledger_posting_checked on leg 1), measured about a quarter of a batch's
-- server CPU.
--
-- "Inserted by this database transaction" is the transaction row's xmin
-- being the current transaction id and its posted_at not before the
-- transaction's start (a row inserted in a savepoint has its
-- subtransaction's id: its later postings are then checked at once, which
-- is stricter, never weaker).
--
-- Re-runnable (IF EXISTS, OR REPLACE): this file is numbered in the
-- ledger's range, so databases migrated before it existed apply it after
-- later files (migrations.Up allows that order).

-- One transaction, whole: its fields, every posting's fields and account,
-- legs 1..n, at least two postings summing to zero per currency. Raises the
-- first rule broken, with the constraint names ledger.MapCommitError maps.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_check_transaction(p_id bigint) RETURNS void LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_n bigint;
    v_sum numeric;
    v_single boolean;
    v_accounts_ok boolean;
    v_fields_ok boolean;
BEGIN
    SELECT count(*), sum(p.amount), min(p.currency) = max(p.currency),
           -- A correlated EXISTS: one primary-key probe per posting, where a
           -- join let the generic plan hash the whole accounts table.
           coalesce(bool_and(EXISTS (SELECT 1 FROM ledger_accounts a
                                     WHERE a.id = p.account_id AND a.currency = p.currency)), true),
           coalesce(bool_and(p.seq >= 1 AND p.amount <> 0) AND min(p.leg) = 1 AND max(p.leg) = count(*), true)
    INTO v_n, v_sum, v_single, v_accounts_ok, v_fields_ok
    FROM ledger_postings p
    WHERE p.transaction_id = p_id;
    IF NOT v_accounts_ok THEN
        RAISE EXCEPTION 'ledger: posting for a missing account or in another currency than its account'
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'ledger_postings_account';
    END IF;
    IF NOT v_fields_ok THEN
        RAISE EXCEPTION 'ledger: transaction % has a posting with a sequence number below 1 or a zero amount, or its legs are not numbered 1..n', p_id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_postings_valid';
    END IF;
    IF v_n >= 2 AND NOT v_single THEN
        SELECT CASE WHEN bool_and(x.s = 0) THEN 0 ELSE 1 END INTO v_sum
        FROM (SELECT sum(p.amount) AS s FROM ledger_postings p
              WHERE p.transaction_id = p_id GROUP BY p.currency) x;
    END IF;
    IF v_n < 2 OR v_sum <> 0 THEN
        RAISE EXCEPTION 'ledger: transaction % is not balanced (% postings)', p_id, v_n
            USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_transaction_balanced';
    END IF;
END
$$;
-- +goose StatementEnd

-- Fires once per inserted transaction, at COMMIT.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_check_balanced() RETURNS trigger LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    IF NOT (length(NEW.idempotency_key) BETWEEN 1 AND 255
            AND NEW.cause_kind ~ '^[a-z][a-z0-9_]{0,39}$'
            AND length(NEW.cause_id) BETWEEN 1 AND 255
            AND length(NEW.description) <= 1000) THEN
        RAISE EXCEPTION 'ledger: transaction % is invalid (idempotency key 1-255 characters, cause kind a lowercase word, cause id 1-255 characters, description at most 1000)', NEW.id
            USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_transactions_valid';
    END IF;
    PERFORM ledger_check_transaction(NEW.id);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- Fires once per INSERT statement on ledger_postings, after it.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_check_postings() RETURNS trigger LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_tx bigint;
    v_state text;
BEGIN
    -- A correlated subquery per distinct transaction: one primary-key probe
    -- each (a join let the planner, which cannot know the transition
    -- table's size, hash the whole transactions table).
    FOR v_tx, v_state IN
        SELECT x.tid, x.state
        FROM (SELECT n.tid,
                     (SELECT CASE WHEN t.xmin = pg_current_xact_id()::xid AND t.posted_at >= now()
                                  THEN 'new' ELSE 'old' END
                      FROM ledger_transactions t WHERE t.id = n.tid) AS state
              FROM (SELECT DISTINCT np.transaction_id AS tid FROM ledger_new_postings np) n) x
        WHERE x.state IS DISTINCT FROM 'new'
    LOOP
        IF v_state IS NULL THEN
            RAISE EXCEPTION 'ledger: posting for a missing transaction'
                USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'ledger_postings_transaction';
        END IF;
        PERFORM ledger_check_transaction(v_tx);
    END LOOP;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

DROP TRIGGER IF EXISTS ledger_posting_checked ON ledger_postings;
DROP TRIGGER IF EXISTS ledger_postings_checked ON ledger_postings;
CREATE TRIGGER ledger_postings_checked AFTER INSERT ON ledger_postings
    REFERENCING NEW TABLE AS ledger_new_postings
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_check_postings();

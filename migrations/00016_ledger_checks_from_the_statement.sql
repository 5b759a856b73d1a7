-- +goose Up
-- ledger_postings_checked checks a transaction written whole by one
-- statement from that statement's own rows (issue 19). Same rules, same
-- refusals, same constraint names (ledger.MapCommitError) as 00015.
--
-- 00015 read every posting of every transaction the statement touched back
-- from ledger_postings (an index scan and a heap fetch per posting) and
-- probed ledger_accounts once per posting. Now:
--
--   * accounts: each distinct (account, currency) of the statement is
--     probed once (a hot account in a batch of 64 transfers: once, not 64
--     times);
--   * a transaction whose postings in the statement are legs 1..n (n >= 2),
--     in one currency, summing to zero, with sequence numbers from 1 and
--     non-zero amounts, is whole when it exists and has no posting with a
--     leg above n. That is one primary-key probe and one index probe that
--     finds nothing (no heap fetch). No posting with a leg below 1 can
--     exist: every posting ever inserted passed this trigger, whose legs
--     1..n rule refuses it, and legs are unique per transaction;
--   * any other transaction (a later leg added to an old one, one balanced
--     in several currencies, one that breaks a rule) is checked whole, from
--     the table, by ledger_check_transaction, which raises the precise
--     error or passes it, as before.
--
-- Re-runnable (OR REPLACE): this file is numbered in the ledger's range, so
-- databases migrated before it existed apply it after later files
-- (migrations.Up allows that order).

-- ledger_check_new_transactions as in 00015, with its EXISTS kept a probe
-- (OFFSET 0, see below).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_check_new_transactions() RETURNS trigger LANGUAGE plpgsql
SET enable_seqscan = off SET jit = off AS $$
DECLARE
    v_id bigint;
    v_valid boolean;
BEGIN
    SELECT x.id, x.valid INTO v_id, v_valid
    FROM (SELECT t.id, length(t.idempotency_key) BETWEEN 1 AND 255
                       AND t.cause_kind ~ '^[a-z][a-z0-9_]{0,39}$'
                       AND length(t.cause_id) BETWEEN 1 AND 255
                       AND length(t.description) <= 1000 AS valid
          FROM ledger_new_transactions t OFFSET 0) x
    WHERE NOT x.valid
       OR NOT EXISTS (SELECT 1 FROM ledger_postings p WHERE p.transaction_id = x.id OFFSET 0)
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_check_postings() RETURNS trigger LANGUAGE plpgsql
SET enable_seqscan = off SET jit = off AS $$
DECLARE
    v_tx bigint;
    v_exists boolean;
BEGIN
    -- Correlated subqueries, each a primary-key or ledger_postings_leg
    -- probe per row. OFFSET 0 keeps each EXISTS a probe: without it the
    -- planner may turn it into a join or a hashed subplan, which reads the
    -- whole table on every statement. It picks that when the session
    -- first plans the query on small tables and keeps the plan: measured,
    -- a hashed NOT EXISTS on ledger_transactions made ledger.Post 3-5 times
    -- slower as the ledger grew (docs/pitfalls.md).
    IF EXISTS (SELECT 1
               FROM (SELECT DISTINCT np.account_id, np.currency FROM ledger_new_postings np) d
               WHERE NOT EXISTS (SELECT 1 FROM ledger_accounts a
                                 WHERE a.id = d.account_id AND a.currency = d.currency OFFSET 0)) THEN
        RAISE EXCEPTION 'ledger: posting for a missing account or in another currency than its account'
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'ledger_postings_account';
    END IF;
    -- whole: the statement's postings of the transaction are legs 1..n
    -- (n >= 2), in one currency, summing to zero, with valid fields.
    FOR v_tx, v_exists IN
        SELECT y.tid, y.has_tx
        FROM (SELECT x.tid, x.legs, x.whole,
                     EXISTS (SELECT 1 FROM ledger_transactions t WHERE t.id = x.tid OFFSET 0) AS has_tx
              FROM (SELECT np.transaction_id AS tid, count(*) AS legs,
                           count(*) >= 2 AND min(np.currency) = max(np.currency) AND sum(np.amount) = 0
                               AND bool_and(np.seq >= 1 AND np.amount <> 0)
                               AND min(np.leg) = 1 AND max(np.leg) = count(*) AS whole
                    FROM ledger_new_postings np
                    GROUP BY np.transaction_id) x
              OFFSET 0) y
        WHERE NOT y.whole OR NOT y.has_tx
           OR EXISTS (SELECT 1 FROM ledger_postings p WHERE p.transaction_id = y.tid AND p.leg > y.legs OFFSET 0)
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

-- The write functions keep index plans too. Their statements are planned
-- once per session (generic plans): one planned while ledger_accounts held
-- a handful of rows locked and updated accounts by a sequential scan, under
-- the row locks, for as long as the connection lived, however many
-- accounts came later. Every statement they run is an index lookup.
-- +goose StatementBegin
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
             WHERE p.proname IN ('ledger_post', 'ledger_post_batch', 'ledger_check_transaction')
               AND p.pronamespace = current_schema()::regnamespace
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET enable_seqscan = off', f);
    END LOOP;
END
$$;
-- +goose StatementEnd

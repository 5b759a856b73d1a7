-- +goose Up
-- ledger_post writes a plain transfer in one statement (issue 19).
--
-- A call of ledger_post (00100) spent about a quarter of its server CPU in
-- PL/pgSQL itself: a lock query, then loops over legs and accounts
-- assigning array elements one expression at a time, a hashing loop, the
-- write statement, and a RETURN NEXT loop. For the common transfer, two
-- legs on two different accounts (named by id, or by code) and no
-- reversal, the same work is now the accounts' lock in id order and then
-- one statement: compute balances, sequence numbers and the chained hashes
-- from the locked rows, check everything ledger_post checked, and only
-- then insert the transaction and the postings and update the accounts;
-- its rows are the answer.
--
-- Anything else, and any transfer that statement would refuse or that
-- finds its key already used, is left to the general function, which is
-- 00100's ledger_post renamed ledger_post_general (it keeps its owner
-- rights, its pinned search path and its grants): it answers with the exact
-- refusal (insufficient funds, unknown account, currency mismatch, an
-- invalid or unbalanced transaction) or the replay. Nothing was written by
-- the statement then: each insert and update hangs on the transaction
-- insert, which runs only when every check passed and the key was new.
--
-- Both run as the ledger tables' owner with the search path pinned
-- (00100) and are not PUBLIC's to call (00101).
--
-- Re-runnable.

-- +goose StatementBegin
DO $$
BEGIN
    IF to_regprocedure('ledger_post_general(text, text, text, text, jsonb, timestamptz, bigint, bigint[], text[], numeric[], text[])') IS NULL THEN
        ALTER FUNCTION ledger_post(text, text, text, text, jsonb, timestamptz, bigint, bigint[], text[], numeric[], text[])
            RENAME TO ledger_post_general;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_post(
    p_key text, p_cause_kind text, p_cause_id text, p_description text,
    p_metadata jsonb, p_effective_at timestamptz, p_reverses_id bigint,
    p_account_ids bigint[], p_account_codes text[], p_amounts numeric[], p_currencies text[])
RETURNS TABLE (outcome text, detail text, transaction_id bigint, posted_at timestamptz,
               leg int, account_id bigint, account_code text, seq bigint,
               balance_after numeric, hash bytea)
LANGUAGE plpgsql
-- As ledger_post_general, and for two rows neither a bitmap scan (the
-- accounts are locked through a plain scan of the primary key, which
-- yields them in id order, no sort) nor a hash or merge join (a hash join
-- allocates its table on every call; docs/pitfalls.md).
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    v_ids bigint[];
BEGIN
    IF coalesce(cardinality(p_amounts), 0) = 2 AND cardinality(p_account_ids) = 2
       AND cardinality(p_account_codes) = 2 AND cardinality(p_currencies) = 2
       AND p_reverses_id IS NULL
       AND length(p_key) BETWEEN 1 AND 255
       AND p_cause_kind ~ '^[a-z][a-z0-9_]{0,39}$'
       AND length(p_cause_id) BETWEEN 1 AND 255
       AND length(coalesce(p_description, '')) <= 1000 THEN
        -- Saldo names accounts by id; a leg naming its account by code
        -- (id 0 or NULL) gets the id of that code, or NULL if none has it.
        v_ids := p_account_ids;
        IF NOT coalesce(0 <> ALL (v_ids), false) THEN
            v_ids := ARRAY(SELECT CASE WHEN coalesce(u.id, 0) <> 0 THEN u.id
                                       ELSE (SELECT a.id FROM ledger_accounts a WHERE a.code = u.code) END
                           FROM unnest(p_account_ids, p_account_codes) WITH ORDINALITY AS u(id, code, g)
                           ORDER BY u.g);
        END IF;
    END IF;
    -- Two different accounts, both found (v_ids is NULL when the test
    -- above failed).
    IF v_ids[1] <> v_ids[2] THEN
        -- The lock first, in id order as every writer takes it, in a
        -- statement of its own: the writing statement then starts with a
        -- snapshot that sees the accounts as locked. Taken inside it, a
        -- lock that waited for another transfer left the UPDATE below to
        -- find the rows changed since its snapshot and re-check them
        -- (EvalPlanQual), which made a contended transfer dearer than in
        -- ledger_post_general.
        PERFORM FROM ledger_accounts a WHERE a.id = ANY (v_ids) ORDER BY a.id FOR UPDATE;
        RETURN QUERY
        WITH a AS MATERIALIZED (
            SELECT a.id, a.code, a.currency, a.allow_negative, a.balance, a.last_seq, a.last_hash,
                   a.last_posted_at
            FROM ledger_accounts a
            WHERE a.id = ANY (v_ids)
        ), j AS MATERIALIZED (
            -- Each leg with its account as locked (none if it does not
            -- exist) and what it makes of it; ok when ledger_post_general
            -- would accept the leg. The accounts differ, so each leg is its
            -- account's only one: the balance after is the locked balance
            -- plus the amount, the sequence number the next.
            SELECT u.g::int AS leg, u.amt, u.cur, a.id, a.code, a.last_hash, a.last_posted_at,
                   a.balance + u.amt AS bal, a.last_seq + 1 AS seq,
                   coalesce(u.amt <> 0 AND u.cur = p_currencies[1] AND a.currency = u.cur
                            AND (a.allow_negative OR a.balance + u.amt >= 0), false) AS ok
            FROM unnest(v_ids, p_amounts, p_currencies) WITH ORDINALITY AS u(acc, amt, cur, g)
            LEFT JOIN a ON a.id = u.acc
        ), c AS MATERIALIZED (
            -- Every leg acceptable, in one currency, summing to zero; and
            -- posted_at never before an account's last posting (00100).
            SELECT bool_and(j.ok) AND sum(j.amt) = 0 AS ok,
                   greatest(clock_timestamp(), max(j.last_posted_at)) AS posted
            FROM j
        ), t AS (
            INSERT INTO ledger_transactions AS t (id, idempotency_key, cause_kind,
                cause_id, description, metadata, effective_at, posted_at, reverses_id)
            OVERRIDING SYSTEM VALUE
            SELECT nextval('ledger_transactions_id_seq'::regclass), p_key, p_cause_kind, p_cause_id,
                coalesce(p_description, ''), coalesce(p_metadata, '{}'),
                coalesce(p_effective_at, c.posted), c.posted, NULL
            FROM c WHERE c.ok
            ON CONFLICT ON CONSTRAINT ledger_transactions_idempotency_key DO NOTHING
            RETURNING t.id, t.posted_at
        ), h AS MATERIALIZED (
            -- The posting hash ledger_post_general computes, chained to the
            -- account's last.
            SELECT j.leg, j.id, j.code, j.seq, j.bal, j.amt, j.cur, t.id AS tx, t.posted_at,
                   sha256(convert_to(concat_ws('|', 'saldo-ledger-posting-v1', j.id, j.seq, t.id, j.leg,
                       trim_scale(j.amt)::text, j.cur, trim_scale(j.bal)::text,
                       (extract(epoch FROM t.posted_at) * 1000000)::bigint), 'UTF8') || j.last_hash) AS hash
            FROM t CROSS JOIN j
        ), p AS (
            INSERT INTO ledger_postings (account_id, seq, transaction_id, leg, amount, currency,
                balance_after, posted_at, hash)
            SELECT h.id, h.seq, h.tx, h.leg, h.amt, h.cur, h.bal, h.posted_at, h.hash FROM h
        ), u AS (
            UPDATE ledger_accounts AS a
            SET balance = h.bal, last_seq = h.seq, last_hash = h.hash, last_posted_at = h.posted_at
            FROM h WHERE a.id = h.id
        )
        SELECT 'posted'::text, NULL::text, h.tx, h.posted_at, h.leg, h.id, h.code, h.seq, h.bal, h.hash
        FROM h ORDER BY h.leg;
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
    RETURN QUERY SELECT * FROM ledger_post_general(p_key, p_cause_kind, p_cause_id, p_description,
        p_metadata, p_effective_at, p_reverses_id, p_account_ids, p_account_codes, p_amounts, p_currencies);
END
$$;
-- +goose StatementEnd

-- Owner rights, the pinned search path, not PUBLIC's; and whoever may call
-- ledger_post_general (the application role `saldo migrate --app-role`
-- granted before this file) may call the new ledger_post too, so that an
-- upgrade that does not grant again keeps posting.
-- +goose StatementBegin
DO $$
DECLARE
    f regprocedure;
    r regrole;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
             WHERE p.proname IN ('ledger_post', 'ledger_post_general')
               AND p.pronamespace = current_schema()::regnamespace
    LOOP
        EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = %I, pg_temp', f, current_schema());
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
    FOR r IN SELECT a.grantee::regrole
             FROM pg_proc p, aclexplode(p.proacl) a
             WHERE p.oid = 'ledger_post_general(text, text, text, text, jsonb, timestamptz, bigint, bigint[], text[], numeric[], text[])'::regprocedure
               AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION ledger_post(text, text, text, text, jsonb, timestamptz, bigint, bigint[], text[], numeric[], text[]) TO %s', r);
    END LOOP;
END
$$;
-- +goose StatementEnd

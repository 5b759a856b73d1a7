-- +goose Up
-- A merchant statement's page is read through ledger_statement_page (issue
-- 19): the query ledger/statement.go sent, now planned once per session
-- instead of on every call, and a range's first page positions each
-- account at the range's start itself (one round trip instead of three).
--
-- Sent as a prepared statement, PostgreSQL kept choosing a custom plan for
-- the page's query (its generic plan's estimate, with array parameters and a
-- LIMIT parameter, looked dearer than the custom plans'), so every page paid
-- its planning: 0.19-0.25 ms against 0.11-0.20 ms of execution, measured on
-- a 10-million-posting ledger. Inside a PL/pgSQL function each RETURN QUERY
-- keeps its plan for the session, and force_generic_plan makes that the
-- generic plan: the accounts by ledger_accounts_owner, each account's next
-- rows by primary key from its position, a top-N sort, the transactions by
-- primary key. enable_seqscan = off keeps those index paths when a session
-- first plans the query on small tables (the pitfall ledger_post's own SET
-- clauses guard against, docs/pitfalls.md). jit = off: a generic plan is
-- costed without the LIMIT's and the arrays' values, high enough to pass
-- jit_above_cost, and JIT compiled the page's expressions on every call
-- (140-170 ms a page, measured, for 0.8 ms of work); JIT code is not kept
-- with the plan.
--
-- The first rows it returns are the positions it used, one per account of
-- the merchant (leg 0, which no posting has): the cursor of the next page is
-- made from them and the page. An account the cursor names keeps the
-- cursor's position; one it does not name is left out (-1) newest first
-- after the first page, else starts at its end (newest first) or its
-- beginning (oldest first), or, when the range has a bound on the side the
-- listing starts from, at that bound: its last posting before the instant,
-- found by binary search over its sequence (posted_at never goes backwards
-- along it), about 22 primary-key probes for 2.3 million postings.
--
-- Re-runnable (OR REPLACE): this file is numbered in the ledger's range, so
-- databases migrated before it existed apply it after later files
-- (migrations.Up allows that order).

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_statement_page(
    p_descending boolean, p_ids bigint[], p_bounds bigint[], p_limit int,
    p_from timestamptz, p_to timestamptz, p_merchant text, p_currency text, p_named_only boolean)
RETURNS TABLE (account_id bigint, seq bigint, transaction_id bigint, leg smallint, amount text,
               balance_after text, posted_at timestamptz, cause_kind text, cause_id text)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    -- The instant the listing starts from, when the range has one.
    v_at timestamptz := CASE WHEN p_descending THEN p_to ELSE p_from END;
    v_ids bigint[];
    v_bounds bigint[];
BEGIN
    SELECT coalesce(array_agg(a.id ORDER BY a.id), '{}'),
           coalesce(array_agg(CASE
               WHEN x.account_id IS NOT NULL THEN x.bound
               WHEN p_named_only THEN -1
               WHEN v_at IS NULL THEN CASE WHEN p_descending THEN a.last_seq + 1 ELSE 0 END
               -- Each step probes the middle posting by primary key (a
               -- scalar subquery: a join with the work table may be
               -- planned as a scan of the account's whole history).
               ELSE (WITH RECURSIVE search(lo, hi) AS (
                         SELECT 0::bigint, a.last_seq
                         UNION ALL
                         SELECT CASE WHEN m.before THEN m.mid ELSE s.lo END,
                                CASE WHEN m.before THEN s.hi ELSE m.mid - 1 END
                         FROM search s
                         CROSS JOIN LATERAL (
                             SELECT (s.lo + s.hi + 1) / 2 AS mid,
                                    coalesce((SELECT p.posted_at < v_at FROM ledger_postings p
                                              WHERE p.account_id = a.id AND p.seq = (s.lo + s.hi + 1) / 2), false) AS before) m
                         WHERE s.lo < s.hi)
                     SELECT s.lo FROM search s WHERE s.lo >= s.hi)
                    + CASE WHEN p_descending THEN 1 ELSE 0 END
           END ORDER BY a.id), '{}')
    INTO v_ids, v_bounds
    FROM ledger_accounts a
    LEFT JOIN unnest(p_ids, p_bounds) AS x(account_id, bound) ON x.account_id = a.id
    WHERE a.owner_kind = 'merchant' AND a.owner_id = p_merchant AND (p_currency = '' OR a.currency = p_currency);

    RETURN QUERY
    SELECT u.id, u.bound, 0::bigint, 0::smallint, '0'::text, '0'::text, 'epoch'::timestamptz, ''::text, ''::text
    FROM unnest(v_ids, v_bounds) AS u(id, bound);

    -- Each account's next p_limit postings by primary key from its position
    -- (the LATERAL), the time range, the merge in statement order, and the
    -- causes of the page's transactions only. Rows past the range's far end
    -- are only ever at the end of an account's rows, so filtering after
    -- each account's LIMIT loses nothing.
    IF p_descending THEN
        RETURN QUERY
        SELECT p.account_id, p.seq, p.transaction_id, p.leg, p.amount::text, p.balance_after::text, p.posted_at,
               t.cause_kind, t.cause_id
        FROM (
            SELECT p.* FROM unnest(v_ids, v_bounds) AS c(account_id, bound)
            CROSS JOIN LATERAL (
                SELECT p.account_id, p.seq, p.transaction_id, p.leg, p.amount, p.balance_after, p.posted_at
                FROM ledger_postings p
                WHERE p.account_id = c.account_id AND c.bound <> -1 AND p.seq < c.bound
                ORDER BY p.seq DESC LIMIT p_limit) p
            WHERE (p_from IS NULL OR p.posted_at >= p_from) AND (p_to IS NULL OR p.posted_at < p_to)
            ORDER BY p.posted_at DESC, p.account_id DESC, p.seq DESC LIMIT p_limit) p
        JOIN ledger_transactions t ON t.id = p.transaction_id
        ORDER BY p.posted_at DESC, p.account_id DESC, p.seq DESC;
    ELSE
        RETURN QUERY
        SELECT p.account_id, p.seq, p.transaction_id, p.leg, p.amount::text, p.balance_after::text, p.posted_at,
               t.cause_kind, t.cause_id
        FROM (
            SELECT p.* FROM unnest(v_ids, v_bounds) AS c(account_id, bound)
            CROSS JOIN LATERAL (
                SELECT p.account_id, p.seq, p.transaction_id, p.leg, p.amount, p.balance_after, p.posted_at
                FROM ledger_postings p
                WHERE p.account_id = c.account_id AND c.bound <> -1 AND p.seq > c.bound
                ORDER BY p.seq LIMIT p_limit) p
            WHERE (p_from IS NULL OR p.posted_at >= p_from) AND (p_to IS NULL OR p.posted_at < p_to)
            ORDER BY p.posted_at, p.account_id, p.seq LIMIT p_limit) p
        JOIN ledger_transactions t ON t.id = p.transaction_id
        ORDER BY p.posted_at, p.account_id, p.seq;
    END IF;
END
$$;
-- +goose StatementEnd

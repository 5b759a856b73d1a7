-- +goose Up
-- The ledger's hash chain, version 2: it covers what caused each transaction
-- and which account each posting belongs to (R22, R23: tamper evidence for
-- the auditor who replays the ledger; docs/architecture.md "Hash chain").
--
-- A v1 posting hash (00010 to 00102) is
--   sha256('saldo-ledger-posting-v1'|account id|seq|transaction id|leg|amount|
--          currency|balance_after|posted_at micros) || previous hash,
-- starting from the empty string. It covers neither the transaction's cause
-- (cause_kind, cause_id: which payout, refund, charge or funding the money
-- moved for), nor its idempotency key (`<cause>:<attempt id>`, R22), nor
-- the account's identity: whoever can bypass the append-only triggers (the
-- tables' owner) could re-attribute a payout's reserve to another payout,
-- or swap two accounts' codes, and every chain would still verify.
--
-- v2, for accounts opened from this file on:
--   * the chain starts from a genesis hash of the account's identity,
--       sha256('saldo-ledger-account-v2'|id|code|owner_kind|owner_id|purpose|
--              currency|allow_negative)
--     (allow_negative as 't' or 'f'); none of these can hold a '|'
--     (ledger_accounts_valid). The BEFORE INSERT trigger computes it and
--     stores it as chain_genesis and as the head (last_hash) the first
--     posting chains to: the write functions read last_hash as before, and
--     pay nothing for the genesis.
--   * a posting's hash is
--       sha256('saldo-ledger-posting-v2'|account id|seq|transaction id|leg|
--              amount|currency|balance_after|posted_at micros|cause_kind|
--              reversed transaction id or 0|length(cause_id)|cause_id|
--              length(idempotency_key)|idempotency_key) || previous hash
--     (lengths in characters). cause_id and the key are free text and may
--     hold '|': each is preceded by its length, so no other cause and key
--     produce the same input (cause_kind is a lowercase word, the rest are
--     numbers and a currency code). The values are the transaction row's,
--     which every writer inserts in the same statement or call: no extra
--     read per posting.
--
-- Versioning without rewriting history: ledger_accounts.chain_version is
-- added with 1 for every existing account (a catalog-only default, no table
-- rewrite), then its default becomes 2, so accounts opened afterwards chain
-- v2 from their first posting and older ones stay v1 for ever. An account's
-- version and genesis are part of its identity (ledger_accounts_identity_fixed)
-- and not the application's to choose (migrations.GrantApplicationRole
-- grants INSERT on the other identity columns only); the insert trigger
-- refuses any other version or a genesis given by the caller. Every writer
-- (ledger_post's one statement, ledger_post_general, ledger_post_batch)
-- computes the hash of each account's version; ledger.Verify replays each
-- account with its version and reports a v2 account whose genesis does not
-- match its identity (chain_genesis_mismatch).
--
-- Re-runnable (IF NOT EXISTS, OR REPLACE, DROP ... IF EXISTS).

ALTER TABLE ledger_accounts ADD COLUMN IF NOT EXISTS chain_version smallint NOT NULL DEFAULT 1;
ALTER TABLE ledger_accounts ALTER COLUMN chain_version SET DEFAULT 2;
ALTER TABLE ledger_accounts ADD COLUMN IF NOT EXISTS chain_genesis bytea;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_accounts_validate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.owner_kind NOT IN ('merchant', 'platform', 'provider')
       OR NEW.owner_id !~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$'
       OR NEW.purpose !~ '^[a-z][a-z0-9_]{0,31}$'
       OR NEW.currency !~ '^[A-Z]{3}$'
       OR NEW.code <> NEW.owner_kind || '/' || NEW.owner_id || '/' || NEW.purpose || '/' || NEW.currency
       OR NEW.balance <> 0 OR NEW.last_seq <> 0 OR NEW.last_hash <> '\x'::bytea
       OR NEW.chain_version <> 2 OR NEW.chain_genesis IS NOT NULL THEN
        RAISE EXCEPTION 'ledger: invalid account % (owner kind merchant|platform|provider, owner id, purpose, currency, code = kind/id/purpose/currency, empty history, chain version 2 and its genesis left to the ledger)',
            NEW.code USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_accounts_valid';
    END IF;
    -- The v2 chain's genesis (00108): the identity, id included (an
    -- identity column's value is drawn before BEFORE triggers run).
    NEW.chain_genesis := sha256(convert_to(concat_ws('|', 'saldo-ledger-account-v2', NEW.id, NEW.code,
        NEW.owner_kind, NEW.owner_id, NEW.purpose, NEW.currency, NEW.allow_negative), 'UTF8'));
    NEW.last_hash := NEW.chain_genesis;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- The version and genesis never change, like the rest of the identity; the
-- trigger still fires only for statements naming these columns, so the
-- writers' balance updates pay nothing for it.
DROP TRIGGER IF EXISTS ledger_accounts_identity_fixed ON ledger_accounts;
CREATE TRIGGER ledger_accounts_identity_fixed
    BEFORE UPDATE OF id, code, owner_kind, owner_id, purpose, currency, allow_negative,
        chain_version, chain_genesis ON ledger_accounts
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();

-- ledger_post's one statement (00102), hashing by the account's version.
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
                   a.chain_version, a.last_posted_at
            FROM ledger_accounts a
            WHERE a.id = ANY (v_ids)
        ), j AS MATERIALIZED (
            -- Each leg with its account as locked (none if it does not
            -- exist) and what it makes of it; ok when ledger_post_general
            -- would accept the leg. The accounts differ, so each leg is its
            -- account's only one: the balance after is the locked balance
            -- plus the amount, the sequence number the next.
            SELECT u.g::int AS leg, u.amt, u.cur, a.id, a.code, a.last_hash, a.chain_version, a.last_posted_at,
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
            RETURNING t.id, t.posted_at, t.cause_kind, t.cause_id, t.idempotency_key
        ), h AS MATERIALIZED (
            -- The posting hash ledger_post_general computes, of the
            -- account's chain version, chained to the account's last: v2
            -- (00108) also covers the transaction's cause and key, from the
            -- row just inserted (no reversal here: 0).
            SELECT j.leg, j.id, j.code, j.seq, j.bal, j.amt, j.cur, t.id AS tx, t.posted_at,
                   sha256(convert_to(CASE WHEN j.chain_version = 1
                       THEN concat_ws('|', 'saldo-ledger-posting-v1', j.id, j.seq, t.id, j.leg,
                           trim_scale(j.amt)::text, j.cur, trim_scale(j.bal)::text,
                           (extract(epoch FROM t.posted_at) * 1000000)::bigint)
                       ELSE concat_ws('|', 'saldo-ledger-posting-v2', j.id, j.seq, t.id, j.leg,
                           trim_scale(j.amt)::text, j.cur, trim_scale(j.bal)::text,
                           (extract(epoch FROM t.posted_at) * 1000000)::bigint,
                           t.cause_kind, 0, length(t.cause_id), t.cause_id,
                           length(t.idempotency_key), t.idempotency_key) END, 'UTF8')
                       || j.last_hash) AS hash
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

-- ledger_post_general (00100's ledger_post, renamed by 00102), the same.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_post_general(
    p_key text, p_cause_kind text, p_cause_id text, p_description text,
    p_metadata jsonb, p_effective_at timestamptz, p_reverses_id bigint,
    p_account_ids bigint[], p_account_codes text[], p_amounts numeric[], p_currencies text[])
RETURNS TABLE (outcome text, detail text, transaction_id bigint, posted_at timestamptz,
               leg int, account_id bigint, account_code text, seq bigint,
               balance_after numeric, hash bytea)
LANGUAGE plpgsql
-- Without this, the plan cache re-plans the statements below with custom
-- plans on every call (they take array parameters), which costs more than
-- running them. The generic plans are index scans.
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    n int := coalesce(cardinality(p_amounts), 0);
    na int := 0;
    a_id bigint[] := '{}';
    a_code text[] := '{}';
    a_cur text[] := '{}';
    a_neg boolean[] := '{}';
    a_bal numeric[] := '{}';
    a_seq bigint[] := '{}';
    a_hash bytea[] := '{}';
    a_ver smallint[] := '{}';
    l_acc int[] := '{}';
    l_bal numeric[] := '{}';
    l_seq bigint[] := '{}';
    l_hash bytea[] := '{}';
    v_ids bigint[];
    v_last timestamptz;
    v_posted timestamptz;
    v_micros bigint;
    v_cause text;
    v_short text;
    v_req_text text;
    v_sum numeric;
    v_single boolean;
    v_balanced boolean;
    v_tx bigint;
    v_old_req text;
    v_inserted bigint;
    i int;
    j int;
    k int;
BEGIN
    IF n < 2 OR cardinality(p_account_ids) <> n OR cardinality(p_account_codes) <> n
       OR cardinality(p_currencies) <> n THEN
        RAISE EXCEPTION 'ledger_post: need at least two legs in parallel arrays of equal length'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- What the statement triggers of 00016 checked until 00100, now that
    -- this function and ledger_post_batch are the only writers: the
    -- transaction's fields, each leg's amount and currency, and each
    -- currency's legs summing to zero. Same refusals, same constraint names
    -- (ledger.MapCommitError). Everything else the triggers checked this
    -- function makes true itself: the accounts exist in the legs' currency
    -- (checked below), the legs are numbered 1..n with sequence numbers
    -- from the account's last, and the transaction is new.
    IF p_key IS NULL OR length(p_key) NOT BETWEEN 1 AND 255
       OR p_cause_kind IS NULL OR p_cause_kind !~ '^[a-z][a-z0-9_]{0,39}$'
       OR p_cause_id IS NULL OR length(p_cause_id) NOT BETWEEN 1 AND 255
       OR length(coalesce(p_description, '')) > 1000 THEN
        RAISE EXCEPTION 'ledger: transaction is invalid (idempotency key 1-255 characters, cause kind a lowercase word, cause id 1-255 characters, description at most 1000)'
            USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_transactions_valid';
    END IF;
    v_sum := 0;
    v_single := true;
    FOR i IN 1..n LOOP
        IF p_amounts[i] IS NULL OR p_amounts[i] = 0 OR p_currencies[i] IS NULL THEN
            RAISE EXCEPTION 'ledger: leg % has a zero or missing amount, or no currency', i
                USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_postings_valid';
        END IF;
        v_sum := v_sum + p_amounts[i];
        v_single := v_single AND p_currencies[i] = p_currencies[1];
    END LOOP;
    -- One currency (the common case) costs no query: a plain expression.
    IF v_single THEN
        v_balanced := v_sum = 0;
    ELSE
        v_balanced := NOT EXISTS (SELECT FROM unnest(p_amounts, p_currencies) AS u(amount, cur)
                                  GROUP BY u.cur HAVING sum(u.amount) <> 0);
    END IF;
    IF NOT v_balanced THEN
        RAISE EXCEPTION 'ledger: transaction is not balanced (each currency''s legs must sum to zero)'
            USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_transaction_balanced';
    END IF;

    -- One statement, no cursor: lock the accounts in id order and read them
    -- into arrays.
    -- The arrays are built in one pass, so they agree with each other
    -- position by position whatever the order.
    -- Legs naming accounts by code are resolved to ids first, so the lock
    -- is one primary-key lookup per account: "id = ANY OR code = ANY" made
    -- the cached generic plan scan the whole table, under the locks.
    v_ids := p_account_ids;
    IF NOT coalesce(0 <> ALL (p_account_ids), false) THEN
        v_ids := p_account_ids || ARRAY(SELECT a.id FROM ledger_accounts a WHERE a.code = ANY (p_account_codes));
    END IF;
    SELECT coalesce(array_agg(l.id), '{}'), coalesce(array_agg(l.code), '{}'),
           coalesce(array_agg(l.currency), '{}'), coalesce(array_agg(l.allow_negative), '{}'),
           coalesce(array_agg(l.balance), '{}'), coalesce(array_agg(l.last_seq), '{}'),
           coalesce(array_agg(l.last_hash), '{}'), coalesce(array_agg(l.chain_version), '{}'),
           max(l.last_posted_at), count(*)
    INTO a_id, a_code, a_cur, a_neg, a_bal, a_seq, a_hash, a_ver, v_last, na
    FROM (SELECT a.id, a.code, a.currency, a.allow_negative, a.balance, a.last_seq, a.last_hash,
                 a.chain_version, a.last_posted_at
          FROM ledger_accounts a
          WHERE a.id = ANY (v_ids)
          ORDER BY a.id
          FOR UPDATE) l;

    v_req_text := concat_ws('|', 'saldo-ledger-request-v1', p_cause_kind, p_cause_id,
                            coalesce(p_reverses_id::text, ''));
    FOR i IN 1..n LOOP
        j := NULL;
        FOR k IN 1..na LOOP
            IF (coalesce(p_account_ids[i], 0) <> 0 AND a_id[k] = p_account_ids[i])
               OR (coalesce(p_account_ids[i], 0) = 0 AND a_code[k] = p_account_codes[i]) THEN
                j := k;
                EXIT;
            END IF;
        END LOOP;
        IF j IS NULL THEN
            outcome := 'unknown_account';
            detail := CASE WHEN coalesce(p_account_ids[i], 0) <> 0 THEN p_account_ids[i]::text
                           ELSE p_account_codes[i] END;
            leg := i;
            RETURN NEXT;
            RETURN;
        END IF;
        IF a_cur[j] <> p_currencies[i] THEN
            outcome := 'currency_mismatch';
            detail := a_code[j];
            leg := i;
            RETURN NEXT;
            RETURN;
        END IF;
        a_bal[j] := a_bal[j] + p_amounts[i];
        a_seq[j] := a_seq[j] + 1;
        IF v_short IS NULL AND NOT a_neg[j] AND a_bal[j] < 0 THEN
            v_short := a_code[j];
        END IF;
        l_acc[i] := j;
        l_bal[i] := a_bal[j];
        l_seq[i] := a_seq[j];
        v_req_text := v_req_text || '|' || a_id[j] || ':' || trim_scale(p_amounts[i]) || ':'
                      || p_currencies[i];
    END LOOP;

    IF p_reverses_id IS NOT NULL OR v_short IS NOT NULL THEN
        -- Off the happy path: a replay must be answered as a replay even if
        -- the original has since spent the funds or reversed the transaction.
        SELECT t.id, ledger_request_text(t.id) INTO v_tx, v_old_req
        FROM ledger_transactions t WHERE t.idempotency_key = p_key;
        IF FOUND THEN
            outcome := CASE WHEN v_old_req = v_req_text THEN 'existing' ELSE 'conflict' END;
            transaction_id := v_tx;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;

    IF p_reverses_id IS NOT NULL THEN
        IF NOT EXISTS (SELECT 1 FROM ledger_transactions t WHERE t.id = p_reverses_id) THEN
            outcome := 'not_found';
            detail := p_reverses_id::text;
            RETURN NEXT;
            RETURN;
        END IF;
        SELECT t.id INTO v_tx FROM ledger_transactions t WHERE t.reverses_id = p_reverses_id;
        IF FOUND THEN
            outcome := 'already_reversed';
            detail := p_reverses_id::text;
            transaction_id := v_tx;
            RETURN NEXT;
            RETURN;
        END IF;
    END IF;

    IF v_short IS NOT NULL THEN
        outcome := 'insufficient_funds';
        detail := v_short;
        RETURN NEXT;
        RETURN;
    END IF;

    -- posted_at never goes backwards on any of the accounts (a clock step
    -- back must not reorder history), so balance-at-time queries stay exact.
    v_posted := greatest(clock_timestamp(), v_last);
    v_micros := (extract(epoch FROM v_posted) * 1000000)::bigint;
    -- The id is drawn first so the posting hashes (which cover it) can be
    -- computed before the single write statement below.
    v_tx := nextval('ledger_transactions_id_seq'::regclass);

    -- The chain of each account's version (00108): v1 accounts (opened
    -- before 00108) as ever; v2 accounts also cover the transaction's cause
    -- and key, the same text for every leg.
    v_cause := concat_ws('|', p_cause_kind, coalesce(p_reverses_id, 0),
                         length(p_cause_id), p_cause_id, length(p_key), p_key);
    FOR i IN 1..n LOOP
        j := l_acc[i];
        -- One expression (a CASE, not an IF): each PL/pgSQL statement
        -- costs an evaluation of its own per leg.
        l_hash[i] := sha256(convert_to(CASE WHEN a_ver[j] = 1
            THEN concat_ws('|', 'saldo-ledger-posting-v1', a_id[j], l_seq[i], v_tx, i,
                trim_scale(p_amounts[i])::text, p_currencies[i], trim_scale(l_bal[i])::text, v_micros)
            ELSE concat_ws('|', 'saldo-ledger-posting-v2', a_id[j], l_seq[i], v_tx, i,
                trim_scale(p_amounts[i])::text, p_currencies[i], trim_scale(l_bal[i])::text, v_micros,
                v_cause) END, 'UTF8') || a_hash[j]);
        a_hash[j] := l_hash[i];
    END LOOP;

    -- All writes in one statement. If the key already exists (a replay, or a
    -- concurrent twin that committed first: ON CONFLICT waits for it), the
    -- transaction insert yields no row and so do the postings and updates.
    WITH t AS (
        INSERT INTO ledger_transactions AS t (id, idempotency_key, cause_kind,
            cause_id, description, metadata, effective_at, posted_at, reverses_id)
        OVERRIDING SYSTEM VALUE
        VALUES (v_tx, p_key, p_cause_kind, p_cause_id, coalesce(p_description, ''),
            coalesce(p_metadata, '{}'), coalesce(p_effective_at, v_posted), v_posted, p_reverses_id)
        ON CONFLICT ON CONSTRAINT ledger_transactions_idempotency_key DO NOTHING
        RETURNING t.id
    ), p AS (
        INSERT INTO ledger_postings (account_id, seq, transaction_id, leg, amount, currency,
            balance_after, posted_at, hash)
        SELECT a_id[l_acc[g]], l_seq[g], t.id, g, p_amounts[g], p_currencies[g], l_bal[g], v_posted,
            l_hash[g]
        FROM t CROSS JOIN generate_series(1, n) AS g
    ), u AS (
        UPDATE ledger_accounts AS a
        SET balance = a_bal[array_position(a_id, a.id)], last_seq = a_seq[array_position(a_id, a.id)],
            last_hash = a_hash[array_position(a_id, a.id)], last_posted_at = v_posted
        FROM t
        WHERE a.id = ANY (a_id)
    )
    SELECT count(*) INTO v_inserted FROM t;

    IF v_inserted = 0 THEN
        SELECT t.id, ledger_request_text(t.id) INTO v_tx, v_old_req
        FROM ledger_transactions t WHERE t.idempotency_key = p_key;
        outcome := CASE WHEN v_old_req = v_req_text THEN 'existing' ELSE 'conflict' END;
        transaction_id := v_tx;
        RETURN NEXT;
        RETURN;
    END IF;

    outcome := 'posted';
    transaction_id := v_tx;
    posted_at := v_posted;
    FOR i IN 1..n LOOP
        leg := i;
        account_id := a_id[l_acc[i]];
        account_code := a_code[l_acc[i]];
        seq := l_seq[i];
        balance_after := l_bal[i];
        hash := l_hash[i];
        RETURN NEXT;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- ledger_post_batch (00100), the same.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_post_batch(
    p_keys text[], p_cause_kinds text[], p_cause_ids text[], p_descriptions text[],
    p_metadata jsonb[], p_effective_at timestamptz[],
    p_tx int[], p_legs int[], p_account_ids bigint[], p_account_codes text[], p_amounts numeric[],
    p_currencies text[],
    OUT outcome text, OUT transaction_ids bigint[], OUT posted_at timestamptz,
    OUT account_ids bigint[], OUT account_codes text[], OUT seqs bigint[],
    OUT balances_after numeric[], OUT hashes bytea[])
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    m int := coalesce(cardinality(p_keys), 0);
    nl int := coalesce(cardinality(p_amounts), 0);
    v_ids bigint[];
    l_head bytea[];
    l_ver smallint[];
    l_prev_i int[];
    l_last boolean[];
    l_prev bytea[];
    u_id bigint[] := '{}';
    u_bal numeric[] := '{}';
    u_seq bigint[] := '{}';
    u_hash bytea[] := '{}';
    v_ok boolean;
    v_micros bigint;
    i int;
    k int;
    v_leg int;
    v_cur text;
    v_sum numeric;
BEGIN
    IF m < 1 OR nl < 2 * m OR cardinality(p_cause_kinds) IS DISTINCT FROM m
       OR cardinality(p_cause_ids) IS DISTINCT FROM m OR cardinality(p_descriptions) IS DISTINCT FROM m
       OR cardinality(p_metadata) IS DISTINCT FROM m OR cardinality(p_effective_at) IS DISTINCT FROM m
       OR cardinality(p_tx) IS DISTINCT FROM nl OR cardinality(p_legs) IS DISTINCT FROM nl
       OR cardinality(p_account_ids) IS DISTINCT FROM nl
       OR cardinality(p_account_codes) IS DISTINCT FROM nl OR cardinality(p_currencies) IS DISTINCT FROM nl THEN
        RAISE EXCEPTION 'ledger_post_batch: parallel arrays of unequal length or a transaction without two legs'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- What the statement triggers of 00016 checked until 00100 (see
    -- ledger_post): a batch that breaks a rule writes nothing and falls
    -- back to ledger_post, transaction by transaction, which refuses the
    -- one at fault with its precise error. Legs come in transaction order,
    -- numbered 1..n within each (n >= 2), in one currency, summing to zero:
    -- the Poster sends them so; a transaction in several currencies takes
    -- the fallback too.
    FOR k IN 1..m LOOP
        IF p_keys[k] IS NULL OR length(p_keys[k]) NOT BETWEEN 1 AND 255
           OR p_cause_kinds[k] IS NULL OR p_cause_kinds[k] !~ '^[a-z][a-z0-9_]{0,39}$'
           OR p_cause_ids[k] IS NULL OR length(p_cause_ids[k]) NOT BETWEEN 1 AND 255
           OR length(coalesce(p_descriptions[k], '')) > 1000 THEN
            outcome := 'fallback';
            RETURN;
        END IF;
    END LOOP;
    k := 0;
    v_leg := 0;
    v_sum := 0;
    FOR i IN 1..nl LOOP
        IF p_tx[i] = k AND p_legs[i] = v_leg + 1 AND p_currencies[i] = v_cur THEN
            v_leg := v_leg + 1;
            v_sum := v_sum + p_amounts[i];
        ELSIF p_tx[i] = k + 1 AND p_legs[i] = 1 AND (k = 0 OR (v_leg >= 2 AND v_sum = 0)) THEN
            k := k + 1;
            v_leg := 1;
            v_sum := p_amounts[i];
            v_cur := p_currencies[i];
        ELSE
            outcome := 'fallback';
            RETURN;
        END IF;
    END LOOP;
    IF k <> m OR v_leg < 2 OR v_sum IS DISTINCT FROM 0 THEN
        outcome := 'fallback';
        RETURN;
    END IF;

    -- Every leg's account id, legs naming theirs by code resolved first
    -- (NULL for an unknown code): the lock below is then one primary-key
    -- lookup per account (see ledger_post), and legs join their account
    -- on the id alone (a hash join, where a join on "id or code" compared
    -- every leg with every account).
    v_ids := p_account_ids;
    IF NOT coalesce(0 <> ALL (p_account_ids), false) THEN
        v_ids := ARRAY(SELECT CASE WHEN coalesce(l.aid, 0) <> 0 THEN l.aid ELSE c.id END
                       FROM unnest(p_account_ids, p_account_codes) WITH ORDINALITY AS l(aid, acode, i)
                       LEFT JOIN ledger_accounts c ON c.code = l.acode AND coalesce(l.aid, 0) = 0
                       ORDER BY l.i);
    END IF;

    -- Lock every account of the batch in id order, then apply every leg in
    -- batch order: running balance and sequence per account, and the
    -- previous leg of the same account in the batch (whose hash the leg's
    -- hash chains to). One window, one sort; the aggregates read the rows
    -- already in leg order.
    WITH a AS MATERIALIZED (
        SELECT a.id, a.code, a.currency, a.allow_negative, a.balance, a.last_seq, a.last_hash,
               a.chain_version, a.last_posted_at
        FROM ledger_accounts a
        WHERE a.id = ANY (v_ids)
        ORDER BY a.id
        FOR UPDATE
    )
    SELECT array_agg(x.id), array_agg(x.code), array_agg(x.bal), array_agg(x.seq),
           array_agg(x.last_hash), array_agg(x.chain_version), array_agg(x.prev_i), array_agg(x.is_last),
           bool_and(x.ok)
               -- Keys: distinct, and none posted yet. One unique-index probe
               -- per key: "idempotency_key = ANY (p_keys)" let the cached
               -- generic plan, made while the table was small, seq-scan it.
               AND (SELECT count(DISTINCT k) = m
                           AND NOT bool_or(EXISTS (SELECT 1 FROM ledger_transactions t
                                                   WHERE t.idempotency_key = k))
                    FROM unnest(p_keys) k),
           greatest(clock_timestamp(), max(x.last_posted_at))
    INTO account_ids, account_codes, balances_after, seqs, l_head, l_ver, l_prev_i, l_last, v_ok, posted_at
    FROM (SELECT l.i, a.id, a.code, a.last_hash, a.chain_version, a.last_posted_at,
                 a.id IS NOT NULL AND a.currency = l.cur AND l.amount <> 0 AND l.tx BETWEEN 1 AND m
                     AND (a.allow_negative OR a.balance + sum(l.amount) OVER w >= 0) AS ok,
                 a.balance + sum(l.amount) OVER w AS bal,
                 a.last_seq + row_number() OVER w AS seq,
                 lag(l.i) OVER w AS prev_i,
                 lead(l.i) OVER w IS NULL AS is_last
          FROM unnest(p_tx, v_ids, p_amounts, p_currencies)
               WITH ORDINALITY AS l(tx, aid, amount, cur, i)
          LEFT JOIN a ON a.id = l.aid
          WINDOW w AS (PARTITION BY a.id ORDER BY l.i)
          ORDER BY l.i) x;

    IF NOT coalesce(v_ok, false) THEN
        outcome := 'fallback';
        RETURN;
    END IF;

    SELECT array_agg(nextval('ledger_transactions_id_seq'::regclass)) INTO transaction_ids
    FROM generate_series(1, m);
    v_micros := (extract(epoch FROM posted_at) * 1000000)::bigint;
    l_prev := l_head;
    hashes := l_head;
    FOR i IN 1..nl LOOP
        k := p_tx[i];
        IF l_prev_i[i] IS NOT NULL THEN
            l_prev[i] := hashes[l_prev_i[i]];
        END IF;
        -- Each account's chain version (00108; see ledger_post_general),
        -- in one expression. A batch reverses nothing: the reversed id is 0.
        hashes[i] := sha256(convert_to(CASE WHEN l_ver[i] = 1
            THEN concat_ws('|', 'saldo-ledger-posting-v1',
                account_ids[i], seqs[i], transaction_ids[k], p_legs[i],
                trim_scale(p_amounts[i])::text, p_currencies[i], trim_scale(balances_after[i])::text,
                v_micros)
            ELSE concat_ws('|', 'saldo-ledger-posting-v2',
                account_ids[i], seqs[i], transaction_ids[k], p_legs[i],
                trim_scale(p_amounts[i])::text, p_currencies[i], trim_scale(balances_after[i])::text,
                v_micros, p_cause_kinds[k], 0, length(p_cause_ids[k]), p_cause_ids[k],
                length(p_keys[k]), p_keys[k]) END, 'UTF8') || l_prev[i]);
        IF l_last[i] THEN
            u_id := u_id || account_ids[i];
            u_bal := u_bal || balances_after[i];
            u_seq := u_seq || seqs[i];
            u_hash := u_hash || hashes[i];
        END IF;
    END LOOP;

    WITH t AS (
        INSERT INTO ledger_transactions AS t (id, idempotency_key, cause_kind,
            cause_id, description, metadata, effective_at, posted_at)
        OVERRIDING SYSTEM VALUE
        SELECT transaction_ids[q], p_keys[q], p_cause_kinds[q], p_cause_ids[q], coalesce(p_descriptions[q], ''),
            coalesce(p_metadata[q], '{}'), coalesce(p_effective_at[q], posted_at), posted_at
        FROM generate_series(1, m) AS q
    ), p AS (
        INSERT INTO ledger_postings (account_id, seq, transaction_id, leg, amount, currency,
            balance_after, posted_at, hash)
        SELECT account_ids[g], seqs[g], transaction_ids[p_tx[g]], p_legs[g], p_amounts[g],
            p_currencies[g], balances_after[g], posted_at, hashes[g]
        FROM generate_series(1, nl) AS g
    )
    -- By primary key: joining generate_series made the generic plan hash
    -- the whole accounts table for every batch.
    UPDATE ledger_accounts AS a
    SET balance = u_bal[array_position(u_id, a.id)], last_seq = u_seq[array_position(u_id, a.id)],
        last_hash = u_hash[array_position(u_id, a.id)], last_posted_at = posted_at
    WHERE a.id = ANY (u_id);
    outcome := 'posted';
END
$$;
-- +goose StatementEnd

-- CREATE OR REPLACE keeps the functions' owner and grants (not PUBLIC's,
-- 00101; the application role's EXECUTE) but not their attributes: run as
-- the owner with the search path pinned again (00100, 00102).
-- +goose StatementBegin
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
             WHERE p.proname IN ('ledger_post', 'ledger_post_general', 'ledger_post_batch')
               AND p.pronamespace = current_schema()::regnamespace
    LOOP
        EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = %I, pg_temp', f, current_schema());
    END LOOP;
END
$$;
-- +goose StatementEnd

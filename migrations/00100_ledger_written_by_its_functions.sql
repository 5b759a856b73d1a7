-- +goose Up
-- The ledger is written only through its functions, and that is what keeps
-- it balanced (decision 0003, option 2; issue 19).
--
-- Until this file two statement triggers (00015, 00016) checked every
-- statement's new transactions and postings again, whoever wrote them:
-- about a sixth of the group-commit Poster's server CPU and a fifth of
-- ledger.Post's, half of it the firing alone (transition tables and the
-- call), which no cheaper body would save. Now:
--
--   * ledger_post and ledger_post_batch check what only the triggers (or
--     the Go side) checked before: the transaction's fields, non-zero
--     amounts, and each currency's legs summing to zero; they already made
--     everything else true themselves (accounts exist in the legs'
--     currency, legs 1..n, sequence numbers from the account's last, a new
--     transaction per key). ledger_post refuses with the triggers' errors
--     and constraint names; ledger_post_batch falls back to ledger_post.
--   * They run as the ledger tables' owner (SECURITY DEFINER, with their
--     search_path pinned to this schema), as does ledger_lock_accounts, the
--     lock the Poster's pipelined path and PostMany take first (SELECT FOR
--     UPDATE needs UPDATE rights the application does not get).
--   * The role saldo serves as gets SELECT on the ledger's tables, INSERT
--     on an account's identity columns only, and EXECUTE on the functions:
--     no INSERT, UPDATE, DELETE or TRUNCATE of a posting or a transaction,
--     and no ALTER (it is not the owner). `saldo migrate --app-role ROLE`,
--     run as the owner, grants exactly that (migrations.GrantApplicationRole).
--     A deployment that serves as the owner itself keeps every check the
--     functions make but not a refusal of hand-written INSERTs: the runbook
--     says so, and `saldo serve` warns at start.
--
-- Unchanged: the append-only triggers, the CHECK refusing a forbidden
-- negative balance (R23), the idempotency key's exclusion constraint, the
-- accounts' validation trigger; `saldo audit verify` still replays every
-- posting after the fact.
--
-- Re-runnable (OR REPLACE, IF EXISTS): numbered in the ledger's second range
-- (00100-00109), applied after later files on databases migrated before it.

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_post(
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
    l_acc int[] := '{}';
    l_bal numeric[] := '{}';
    l_seq bigint[] := '{}';
    l_hash bytea[] := '{}';
    v_ids bigint[];
    v_last timestamptz;
    v_posted timestamptz;
    v_micros bigint;
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
           coalesce(array_agg(l.last_hash), '{}'), max(l.last_posted_at), count(*)
    INTO a_id, a_code, a_cur, a_neg, a_bal, a_seq, a_hash, v_last, na
    FROM (SELECT a.id, a.code, a.currency, a.allow_negative, a.balance, a.last_seq, a.last_hash,
                 a.last_posted_at
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

    FOR i IN 1..n LOOP
        j := l_acc[i];
        l_hash[i] := sha256(convert_to(concat_ws('|', 'saldo-ledger-posting-v1',
            a_id[j], l_seq[i], v_tx, i,
            trim_scale(p_amounts[i])::text, p_currencies[i], trim_scale(l_bal[i])::text,
            v_micros), 'UTF8') || a_hash[j]);
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
               a.last_posted_at
        FROM ledger_accounts a
        WHERE a.id = ANY (v_ids)
        ORDER BY a.id
        FOR UPDATE
    )
    SELECT array_agg(x.id), array_agg(x.code), array_agg(x.bal), array_agg(x.seq),
           array_agg(x.last_hash), array_agg(x.prev_i), array_agg(x.is_last),
           bool_and(x.ok)
               -- Keys: distinct, and none posted yet. One unique-index probe
               -- per key: "idempotency_key = ANY (p_keys)" let the cached
               -- generic plan, made while the table was small, seq-scan it.
               AND (SELECT count(DISTINCT k) = m
                           AND NOT bool_or(EXISTS (SELECT 1 FROM ledger_transactions t
                                                   WHERE t.idempotency_key = k))
                    FROM unnest(p_keys) k),
           greatest(clock_timestamp(), max(x.last_posted_at))
    INTO account_ids, account_codes, balances_after, seqs, l_head, l_prev_i, l_last, v_ok, posted_at
    FROM (SELECT l.i, a.id, a.code, a.last_hash, a.last_posted_at,
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
        hashes[i] := sha256(convert_to(concat_ws('|', 'saldo-ledger-posting-v1',
            account_ids[i], seqs[i], transaction_ids[k], p_legs[i],
            trim_scale(p_amounts[i])::text, p_currencies[i], trim_scale(balances_after[i])::text,
            v_micros), 'UTF8') || l_prev[i]);
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

-- ledger_lock_accounts locks the named accounts in id order, codes resolved
-- to ids first (an "id = ANY OR code = ANY" generic plan scans the table).
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ledger_lock_accounts(p_ids bigint[], p_codes text[]) RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off
SET jit = off
AS $$
BEGIN
    PERFORM FROM ledger_accounts a
    WHERE a.id = ANY (coalesce(p_ids, '{}')
                      || ARRAY(SELECT c.id FROM ledger_accounts c WHERE c.code = ANY (coalesce(p_codes, '{}'))))
    ORDER BY a.id
    FOR UPDATE;
END
$$;
-- +goose StatementEnd

DROP TRIGGER IF EXISTS ledger_transactions_checked ON ledger_transactions;
DROP TRIGGER IF EXISTS ledger_postings_checked ON ledger_postings;
DROP FUNCTION IF EXISTS ledger_check_new_transactions();
DROP FUNCTION IF EXISTS ledger_check_postings();
DROP FUNCTION IF EXISTS ledger_check_transaction(bigint);
-- 00010's row trigger function, unused since 00011.
DROP FUNCTION IF EXISTS ledger_check_posting();

-- The writers run as the owner, with the search path pinned to this schema
-- (pg_temp last: a caller's temporary table cannot stand in for a ledger
-- table). A CREATE OR REPLACE of any of them must repeat this.
-- +goose StatementBegin
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
             WHERE p.proname IN ('ledger_post', 'ledger_post_batch', 'ledger_lock_accounts')
               AND p.pronamespace = current_schema()::regnamespace
    LOOP
        EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = %I, pg_temp', f, current_schema());
    END LOOP;
END
$$;
-- +goose StatementEnd

REVOKE ALL ON ledger_transactions, ledger_postings, ledger_accounts FROM PUBLIC;

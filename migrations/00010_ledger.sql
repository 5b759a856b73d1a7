-- +goose Up
-- The double-entry ledger (issue 2; docs/rules.md R22, R23). Package ledger is the
-- only writer. Conventions:
--   * every amount is signed: a posting adds its amount to its account's
--     balance; the postings of a transaction sum to zero per currency;
--   * balances live on the account row, updated in the same database
--     transaction as the postings, under a row lock taken in id order;
--   * each posting records the account's balance after it, a gap-free
--     per-account sequence number and a sha256 chained per account
--     (no ledger-wide lock, no global chain);
--   * history (transactions, postings) is append-only, enforced by triggers.

CREATE TABLE ledger_accounts (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- code is owner_kind/owner_id/purpose/currency, e.g. merchant/m_42/available/BRL.
    -- The identity columns are validated once, at INSERT, by
    -- ledger_accounts_valid (a CHECK would be re-evaluated on every balance
    -- update), and can never change afterwards (ledger_accounts_identity_fixed).
    code           text NOT NULL UNIQUE,
    owner_kind     text NOT NULL,
    owner_id       text NOT NULL,
    purpose        text NOT NULL,
    currency       text NOT NULL,
    allow_negative boolean NOT NULL,
    balance        numeric NOT NULL DEFAULT 0,
    -- last_seq, last_hash and last_posted_at describe the newest posting of
    -- the account; the next posting continues from them.
    last_seq       bigint NOT NULL DEFAULT 0,
    last_hash      bytea NOT NULL DEFAULT '\x',
    last_posted_at timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    -- R23: the database itself refuses an overdraft, whatever the caller did.
    CONSTRAINT ledger_accounts_no_overdraft CHECK (allow_negative OR balance >= 0)
) WITH (fillfactor = 50); -- room for HOT updates of the balance

-- +goose StatementBegin
CREATE FUNCTION ledger_accounts_validate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.owner_kind NOT IN ('merchant', 'platform', 'provider')
       OR NEW.owner_id !~ '^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$'
       OR NEW.purpose !~ '^[a-z][a-z0-9_]{0,31}$'
       OR NEW.currency !~ '^[A-Z]{3}$'
       OR NEW.code <> NEW.owner_kind || '/' || NEW.owner_id || '/' || NEW.purpose || '/' || NEW.currency
       OR NEW.balance <> 0 OR NEW.last_seq <> 0 OR NEW.last_hash <> '\x'::bytea THEN
        RAISE EXCEPTION 'ledger: invalid account % (owner kind merchant|platform|provider, owner id, purpose, currency, code = kind/id/purpose/currency, empty history)',
            NEW.code USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_accounts_valid';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER ledger_accounts_valid BEFORE INSERT ON ledger_accounts
    FOR EACH ROW EXECUTE FUNCTION ledger_accounts_validate();

CREATE INDEX ledger_accounts_owner ON ledger_accounts (owner_kind, owner_id, currency);

CREATE TABLE ledger_transactions (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    idempotency_key text NOT NULL,
    -- request_hash covers the cause, the reversed transaction and the
    -- (account, amount, currency) legs in order: a replay with the same key
    -- must match it.
    request_hash    bytea NOT NULL,
    cause_kind      text NOT NULL,
    cause_id        text NOT NULL,
    description     text NOT NULL DEFAULT '',
    metadata        jsonb NOT NULL DEFAULT '{}',
    effective_at    timestamptz NOT NULL,
    -- posted_at never goes backwards for any account the transaction touches.
    posted_at       timestamptz NOT NULL,
    reverses_id     bigint REFERENCES ledger_transactions (id),
    CONSTRAINT ledger_transactions_idempotency_key UNIQUE (idempotency_key),
    -- One CHECK rather than four: PostgreSQL rebuilds every CHECK expression
    -- of a table for each INSERT statement.
    CONSTRAINT ledger_transactions_valid CHECK (
        length(idempotency_key) BETWEEN 1 AND 255
        AND cause_kind ~ '^[a-z][a-z0-9_]{0,39}$'
        AND length(cause_id) BETWEEN 1 AND 255
        AND length(description) <= 1000)
);

-- A transaction is reversed at most once.
CREATE UNIQUE INDEX ledger_transactions_reverses ON ledger_transactions (reverses_id)
    WHERE reverses_id IS NOT NULL;
CREATE INDEX ledger_transactions_cause ON ledger_transactions (cause_kind, cause_id);

-- The references of a posting (its account, in the same currency, and its
-- transaction) are checked at COMMIT by the deferred trigger
-- ledger_posting_checked rather than by FOREIGN KEYs (two row-locking
-- lookups per posting on the hottest path of the system). Accounts and
-- transactions are never deleted (triggers), so a reference once valid stays
-- valid.
CREATE TABLE ledger_postings (
    account_id     bigint NOT NULL,
    seq            bigint NOT NULL,
    transaction_id bigint NOT NULL,
    leg            smallint NOT NULL,
    amount         numeric NOT NULL,
    currency       text NOT NULL,
    balance_after  numeric NOT NULL,
    posted_at      timestamptz NOT NULL,
    prev_hash      bytea NOT NULL,
    hash           bytea NOT NULL,
    PRIMARY KEY (account_id, seq),
    CONSTRAINT ledger_postings_leg UNIQUE (transaction_id, leg),
    CONSTRAINT ledger_postings_valid CHECK (seq >= 1 AND leg >= 1 AND amount <> 0)
);

-- No index on (account_id, posted_at): posted_at never decreases along an
-- account's sequence, so BalanceAt binary-searches the primary key instead,
-- and every posting is one index entry cheaper.

-- History is append-only: no UPDATE, DELETE or TRUNCATE on transactions and
-- postings. A correction is a reversal transaction (reverses_id).
-- +goose StatementBegin
CREATE FUNCTION ledger_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ledger: % on % refused: ledger history is append-only (post a reversal instead)',
        TG_OP, TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
END
$$;
-- +goose StatementEnd

CREATE TRIGGER ledger_transactions_append_only BEFORE UPDATE OR DELETE ON ledger_transactions
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_transactions_no_truncate BEFORE TRUNCATE ON ledger_transactions
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_postings_append_only BEFORE UPDATE OR DELETE ON ledger_postings
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_postings_no_truncate BEFORE TRUNCATE ON ledger_postings
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
-- An account's identity never changes (only its balance and chain head do).
-- The trigger fires only when a statement names one of these columns, so the
-- balance updates of ledger_post pay nothing for it.
CREATE TRIGGER ledger_accounts_identity_fixed
    BEFORE UPDATE OF id, code, owner_kind, owner_id, purpose, currency, allow_negative ON ledger_accounts
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_accounts_no_delete BEFORE DELETE OR TRUNCATE ON ledger_accounts
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();

-- Double entry, enforced at COMMIT: every transaction has at least two
-- postings and they sum to zero per currency. Deferred, because the sum is
-- only whole once every posting is in. (This one catches a transaction with
-- no postings at all; ledger_posting_checked below covers the rest.)
-- +goose StatementBegin
CREATE FUNCTION ledger_check_balanced() RETURNS trigger LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_n bigint;
    v_sum numeric;
    v_single boolean;
BEGIN
    -- One plain aggregate for the usual single-currency transaction; per
    -- currency only when currencies are mixed.
    SELECT count(*), sum(p.amount), min(p.currency) = max(p.currency) INTO v_n, v_sum, v_single
    FROM ledger_postings p WHERE p.transaction_id = NEW.id;
    IF v_n >= 2 AND NOT v_single THEN
        SELECT CASE WHEN bool_and(x.s = 0) THEN 0 ELSE 1 END INTO v_sum
        FROM (SELECT sum(p.amount) AS s FROM ledger_postings p
              WHERE p.transaction_id = NEW.id GROUP BY p.currency) x;
    END IF;
    IF v_n < 2 OR v_sum <> 0 THEN
        RAISE EXCEPTION 'ledger: transaction % is not balanced (% postings)', NEW.id, v_n
            USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_transaction_balanced';
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE CONSTRAINT TRIGGER ledger_transaction_balanced AFTER INSERT ON ledger_transactions
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION ledger_check_balanced();

-- Postings are checked at COMMIT too: the posting names an existing
-- account, in that account's currency, and an existing transaction, and its
-- transaction (the whole of it, including postings added later to an old
-- transaction) still has two or more postings summing to zero per currency. A row-level
-- deferred trigger measured far cheaper than a statement-level trigger with
-- a transition table, or than two FOREIGN KEYs per posting.
-- +goose StatementBegin
CREATE FUNCTION ledger_check_posting() RETURNS trigger LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_account_ok boolean;
    v_tx_ok boolean;
    v_n bigint;
    v_sum numeric;
    v_single boolean;
BEGIN
    SELECT EXISTS (SELECT 1 FROM ledger_accounts a WHERE a.id = NEW.account_id AND a.currency = NEW.currency),
           EXISTS (SELECT 1 FROM ledger_transactions t WHERE t.id = NEW.transaction_id),
           count(*), sum(p.amount), min(p.currency) = max(p.currency)
    INTO v_account_ok, v_tx_ok, v_n, v_sum, v_single
    FROM ledger_postings p WHERE p.transaction_id = NEW.transaction_id;
    IF NOT v_account_ok THEN
        RAISE EXCEPTION 'ledger: posting for a missing account or in another currency than its account'
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'ledger_postings_account';
    END IF;
    IF NOT v_tx_ok THEN
        RAISE EXCEPTION 'ledger: posting for a missing transaction'
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'ledger_postings_transaction';
    END IF;
    IF v_n >= 2 AND NOT v_single THEN
        SELECT CASE WHEN bool_and(x.s = 0) THEN 0 ELSE 1 END INTO v_sum
        FROM (SELECT sum(p.amount) AS s FROM ledger_postings p
              WHERE p.transaction_id = NEW.transaction_id GROUP BY p.currency) x;
    END IF;
    IF v_n < 2 OR v_sum <> 0 THEN
        RAISE EXCEPTION 'ledger: transaction % is not balanced (% postings)', NEW.transaction_id, v_n
            USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_transaction_balanced';
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- Leg 2 is skipped: ledger_post numbers legs 1..n, so leg 1 (or any leg
-- beyond 2) already triggers the check of the whole transaction, and a
-- posting added later to an existing transaction cannot reuse leg 2 (unique
-- per transaction). One firing per two-leg transfer instead of two.
CREATE CONSTRAINT TRIGGER ledger_posting_checked AFTER INSERT ON ledger_postings
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.leg <> 2)
    EXECUTE FUNCTION ledger_check_posting();

-- ledger_post posts one transaction in ONE round trip. It never raises for
-- an expected refusal (insufficient funds, idempotency conflict, unknown
-- account, ...): it returns an outcome row instead and writes nothing, so a
-- refusal does not abort the caller's database transaction.
--
-- Legs come as parallel arrays; a leg names its account by id (non-zero) or
-- by code. Steps: lock every named account in id order (FOR UPDATE: no
-- deadlocks); resolve legs and apply them in order to running balances;
-- compute the request hash over the cause, the reversed transaction and the
-- legs (account id, amount, currency) in order; refuse an overdraft of an
-- account that forbids negatives ('insufficient_funds', detail = account
-- code) unless the key was already posted; insert the transaction (ON
-- CONFLICT on the key: a replay, or a racing twin that committed first, is
-- detected without an error and answered 'existing' or 'conflict'); chain
-- the posting hashes; insert the postings; update the balances.
--
-- The happy path runs two statements (lock and read the accounts; insert
-- transaction and postings and update the balances in one statement with
-- data-modifying CTEs); everything else is plpgsql arithmetic.
--
-- Outcomes: posted (one row per leg), existing (one row, transaction_id set),
-- conflict, insufficient_funds, unknown_account, currency_mismatch,
-- not_found (reversed transaction missing), already_reversed.
-- +goose StatementBegin
CREATE FUNCTION ledger_post(
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
    l_prev bytea[] := '{}';
    l_hash bytea[] := '{}';
    v_last timestamptz;
    v_posted timestamptz;
    v_micros bigint;
    v_short text;
    v_req_text text;
    v_req bytea;
    v_tx bigint;
    v_old_req bytea;
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

    -- One statement, no cursor: lock the accounts in id order and read them
    -- into arrays.
    -- The arrays are built in one pass, so they agree with each other
    -- position by position whatever the order.
    SELECT coalesce(array_agg(l.id), '{}'), coalesce(array_agg(l.code), '{}'),
           coalesce(array_agg(l.currency), '{}'), coalesce(array_agg(l.allow_negative), '{}'),
           coalesce(array_agg(l.balance), '{}'), coalesce(array_agg(l.last_seq), '{}'),
           coalesce(array_agg(l.last_hash), '{}'), max(l.last_posted_at), count(*)
    INTO a_id, a_code, a_cur, a_neg, a_bal, a_seq, a_hash, v_last, na
    FROM (SELECT a.id, a.code, a.currency, a.allow_negative, a.balance, a.last_seq, a.last_hash,
                 a.last_posted_at
          FROM ledger_accounts a
          WHERE a.id = ANY (p_account_ids) OR a.code = ANY (p_account_codes)
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
    v_req := sha256(convert_to(v_req_text, 'UTF8'));

    IF p_reverses_id IS NOT NULL OR v_short IS NOT NULL THEN
        -- Off the happy path: a replay must be answered as a replay even if
        -- the original has since spent the funds or reversed the transaction.
        SELECT t.id, t.request_hash INTO v_tx, v_old_req
        FROM ledger_transactions t WHERE t.idempotency_key = p_key;
        IF FOUND THEN
            outcome := CASE WHEN v_old_req = v_req THEN 'existing' ELSE 'conflict' END;
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
        l_prev[i] := a_hash[j];
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
        INSERT INTO ledger_transactions AS t (id, idempotency_key, request_hash, cause_kind,
            cause_id, description, metadata, effective_at, posted_at, reverses_id)
        OVERRIDING SYSTEM VALUE
        VALUES (v_tx, p_key, v_req, p_cause_kind, p_cause_id, coalesce(p_description, ''),
            coalesce(p_metadata, '{}'), coalesce(p_effective_at, v_posted), v_posted, p_reverses_id)
        ON CONFLICT (idempotency_key) DO NOTHING
        RETURNING t.id
    ), p AS (
        INSERT INTO ledger_postings (account_id, seq, transaction_id, leg, amount, currency,
            balance_after, posted_at, prev_hash, hash)
        SELECT a_id[l_acc[g]], l_seq[g], t.id, g, p_amounts[g], p_currencies[g], l_bal[g], v_posted,
            l_prev[g], l_hash[g]
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
        SELECT t.id, t.request_hash INTO v_tx, v_old_req
        FROM ledger_transactions t WHERE t.idempotency_key = p_key;
        outcome := CASE WHEN v_old_req = v_req THEN 'existing' ELSE 'conflict' END;
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

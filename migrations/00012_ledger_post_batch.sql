-- +goose Up
-- ledger_post_batch posts several transactions in one call, set-based, for
-- ledger.Poster's group commit (issue 2): one statement that locks every
-- account of the batch (in id order) and computes every running balance and
-- sequence number, a loop that only chains the hashes, and one statement
-- writing every transaction, posting and balance. Per-statement
-- executor start-up, the dominant cost of ledger_post, is paid once per
-- batch instead of once per transaction.
--
-- It is a fast path for the batch where nothing is refused: it writes
-- nothing and answers one row with outcome 'fallback' when any transaction
-- of the batch names an unknown account or one in another currency, has a
-- zero amount, would overdraw an account that forbids negatives, or reuses
-- an idempotency key (already posted, or twice in the batch); reversals are
-- not taken (ledger.Reverse uses ledger_post). The
-- caller then posts each transaction with ledger_post, whose answers cover
-- every refusal. Otherwise it answers 'posted' with the transaction ids
-- (in batch order) and, per leg (flattened in batch order), the account,
-- sequence number, balance after and hash: exactly what ledger_post would
-- have answered had the transactions been posted one after the other in
-- batch order (one posted_at for the whole batch).
-- A twin committed concurrently under one of the keys makes the INSERT fail
-- (unique violation): the whole batch fails and the caller falls back.
--
-- Transactions are given as parallel arrays (keys, cause kinds, cause ids,
-- descriptions, metadata, effective times); legs as parallel arrays
-- flattened over the batch, each naming its transaction's index (p_tx,
-- 1-based) and its leg number in it (p_legs, 1..n), in transaction order.
-- The deferred triggers check every transaction at COMMIT as for any writer.
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
AS $$
#variable_conflict use_column
DECLARE
    m int := coalesce(cardinality(p_keys), 0);
    nl int := coalesce(cardinality(p_amounts), 0);
    l_head bytea[];
    l_prev_i int[];
    l_last boolean[];
    l_prev bytea[];
    v_req text[];
    v_ok boolean;
    v_micros bigint;
    i int;
    k int;
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

    -- Lock every account of the batch in id order, then apply every leg in
    -- batch order: running balance and sequence per account, and the
    -- previous leg of the same account in the batch (whose hash the leg's
    -- hash chains to). One window, one sort; the aggregates read the rows
    -- already in leg order.
    WITH a AS MATERIALIZED (
        SELECT a.id, a.code, a.currency, a.allow_negative, a.balance, a.last_seq, a.last_hash,
               a.last_posted_at
        FROM ledger_accounts a
        WHERE a.id = ANY (p_account_ids) OR a.code = ANY (p_account_codes)
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
          FROM unnest(p_tx, p_account_ids, p_account_codes, p_amounts, p_currencies)
               WITH ORDINALITY AS l(tx, aid, acode, amount, cur, i)
          LEFT JOIN a ON CASE WHEN coalesce(l.aid, 0) <> 0 THEN a.id = l.aid ELSE a.code = l.acode END
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
    v_req := array_fill(''::text, ARRAY[m]);
    FOR i IN 1..nl LOOP
        k := p_tx[i];
        IF l_prev_i[i] IS NOT NULL THEN
            l_prev[i] := hashes[l_prev_i[i]];
        END IF;
        hashes[i] := sha256(convert_to(concat_ws('|', 'saldo-ledger-posting-v1',
            account_ids[i], seqs[i], transaction_ids[k], p_legs[i],
            trim_scale(p_amounts[i])::text, p_currencies[i], trim_scale(balances_after[i])::text,
            v_micros), 'UTF8') || l_prev[i]);
        v_req[k] := v_req[k] || '|' || account_ids[i] || ':' || trim_scale(p_amounts[i]) || ':' || p_currencies[i];
    END LOOP;

    WITH t AS (
        INSERT INTO ledger_transactions AS t (id, idempotency_key, request_hash, cause_kind,
            cause_id, description, metadata, effective_at, posted_at)
        OVERRIDING SYSTEM VALUE
        SELECT transaction_ids[q], p_keys[q],
            sha256(convert_to(concat_ws('|', 'saldo-ledger-request-v1', p_cause_kinds[q],
                p_cause_ids[q], '') || v_req[q], 'UTF8')),
            p_cause_kinds[q], p_cause_ids[q], coalesce(p_descriptions[q], ''),
            coalesce(p_metadata[q], '{}'), coalesce(p_effective_at[q], posted_at), posted_at
        FROM generate_series(1, m) AS q
    ), p AS (
        INSERT INTO ledger_postings (account_id, seq, transaction_id, leg, amount, currency,
            balance_after, posted_at, prev_hash, hash)
        SELECT account_ids[g], seqs[g], transaction_ids[p_tx[g]], p_legs[g], p_amounts[g],
            p_currencies[g], balances_after[g], posted_at, l_prev[g], hashes[g]
        FROM generate_series(1, nl) AS g
    )
    UPDATE ledger_accounts AS a
    SET balance = balances_after[g], last_seq = seqs[g], last_hash = hashes[g], last_posted_at = posted_at
    FROM generate_series(1, nl) AS g
    WHERE l_last[g] AND a.id = account_ids[g];
    outcome := 'posted';
END
$$;
-- +goose StatementEnd

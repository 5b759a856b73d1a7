package payouts

import (
	"context"
	"fmt"

	"github.com/shopspring/decimal"
)

// Violation is one broken payouts invariant found by Verify.
type Violation struct {
	Check  string
	Detail string
}

func (v Violation) String() string { return v.Check + ": " + v.Detail }

// Verify checks the invariants that tie payouts to attempts and the ledger,
// for `saldo audit verify` and after every test:
//
//   - reserved: every merchant's reserved balance per currency equals the sum
//     of its outgoing money whose current attempt is open (pending or
//     unknown). An unknown attempt holds its reserve (R22); a final one has
//     moved it out (settled or released);
//   - status: a payout's current attempt is its own, and the payout is
//     processing exactly when that attempt is open, succeeded exactly when
//     it is succeeded, failed when failed;
//   - refunds: the succeeded, pending and unknown refunds of a charge, and
//     the failed ones the provider later reported paid, never sum to more
//     than the charged amount (refundable's rule);
//   - ledger effects: each outgoing attempt that reached a final status has
//     exactly one settle (succeeded) or release (failed) ledger transaction
//     (a failed one may instead carry its reserve to the payout's next
//     attempt), and every attempt has exactly one reserve, its own or
//     carried in; every such transaction is caused by an outgoing attempt
//     of a payout, moves exactly its amount between the accounts its kind
//     names, and is never reversed (nor is a charge's credit);
//   - splits: a split's total and leg count are its legs'.
func Verify(ctx context.Context, db dbtx) ([]Violation, error) {
	var out []Violation
	rows, err := db.Query(ctx, `
		WITH open_out AS (
			SELECT p.merchant_id, p.currency, sum(p.amount) AS amount
			FROM attempts a JOIN payouts p ON p.id = a.subject_id AND a.direction = 'out'
			WHERE a.status IN ('pending', 'unknown')
			GROUP BY 1, 2
		), reserved AS (
			SELECT owner_id AS merchant_id, currency, balance
			FROM ledger_accounts WHERE owner_kind = 'merchant' AND purpose = 'reserved'
		)
		SELECT merchant_id, currency, coalesce(r.balance, 0), coalesce(o.amount, 0)
		FROM reserved r FULL JOIN open_out o USING (merchant_id, currency)
		WHERE coalesce(r.balance, 0) <> coalesce(o.amount, 0)
		ORDER BY 1, 2`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var m, cur string
		var bal, open decimal.Decimal
		if err := rows.Scan(&m, &cur, &bal, &open); err != nil {
			return nil, err
		}
		out = append(out, Violation{"reserved", fmt.Sprintf("merchant %s %s: reserved balance %s, open outgoing attempts %s", m, cur, bal, open)})
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}

	rows, err = db.Query(ctx, `
		SELECT p.id, p.status, coalesce(a.status, '<none of its own>')
		FROM payouts p LEFT JOIN attempts a ON a.id = p.current_attempt_id AND a.subject_id = p.id AND a.direction = 'out'
		WHERE a.id IS NULL -- no current attempt of its own: NOT (...) below would be NULL
		   OR NOT ((p.status = 'processing' AND a.status IN ('pending', 'unknown'))
		        OR (p.status = 'succeeded' AND a.status = 'succeeded')
		        OR (p.status = 'failed' AND a.status = 'failed'))
		ORDER BY p.id`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id, ps, as string
		if err := rows.Scan(&id, &ps, &as); err != nil {
			return nil, err
		}
		out = append(out, Violation{"status", fmt.Sprintf("payout %s is %s but its current attempt is %s", id, ps, as)})
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}

	rows, err = db.Query(ctx, `
		SELECT c.id, c.amount, sum(p.amount)
		FROM charges c JOIN payouts p ON p.charge_id = c.id AND `+refundTakesSQL+`
		GROUP BY c.id, c.amount HAVING sum(p.amount) > c.amount ORDER BY c.id`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id string
		var amount, refunded decimal.Decimal
		if err := rows.Scan(&id, &amount, &refunded); err != nil {
			return nil, err
		}
		out = append(out, Violation{"refunds", fmt.Sprintf("charge %s of %s has %s refunded or refunding", id, amount, refunded)})
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}

	// A reserve reaches an attempt by its own reserve transaction or carried
	// from the payout's previous attempt (CauseReserveCarry, caused by the
	// failed attempt, naming this one in to_attempt_id); a failed attempt
	// gives its reserve back (release) or carries it on, never both.
	rows, err = db.Query(ctx, `
		WITH carried AS (
			SELECT metadata->>'to_attempt_id' AS attempt_id, count(*) AS n
			FROM ledger_transactions WHERE cause_kind = 'payout_reserve_carry' GROUP BY 1
		)
		SELECT a.id, a.status,
		       count(*) FILTER (WHERE t.cause_kind = 'payout_reserve') + coalesce(min(c.n), 0),
		       count(*) FILTER (WHERE t.cause_kind = 'payout_settle'),
		       count(*) FILTER (WHERE t.cause_kind IN ('payout_release', 'payout_reserve_carry'))
		FROM attempts a JOIN payouts p ON p.id = a.subject_id AND a.direction = 'out'
		LEFT JOIN ledger_transactions t ON t.cause_id = a.id::text
		LEFT JOIN carried c ON c.attempt_id = a.id::text
		GROUP BY a.id, a.status
		HAVING count(*) FILTER (WHERE t.cause_kind = 'payout_reserve') + coalesce(min(c.n), 0) <> 1
		    OR count(*) FILTER (WHERE t.cause_kind = 'payout_settle') <> (a.status = 'succeeded')::int
		    OR count(*) FILTER (WHERE t.cause_kind IN ('payout_release', 'payout_reserve_carry')) <> (a.status = 'failed')::int
		ORDER BY a.id`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id, st string
		var res, set, rel int
		if err := rows.Scan(&id, &st, &res, &set, &rel); err != nil {
			return nil, err
		}
		out = append(out, Violation{"ledger_effects", fmt.Sprintf("attempt %s (%s): %d reserve (own or carried in), %d settle, %d release (or carried on) transactions", id, st, res, set, rel)})
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, ch := range []struct{ name, sql string }{
		{"effect_orphan", effectOrphanSQL}, {"effect_legs", effectLegsSQL}, {"effect_reversed", effectReversedSQL},
		{"split_total", splitTotalSQL},
	} {
		rows, err := db.Query(ctx, ch.sql)
		if err != nil {
			return nil, fmt.Errorf("payouts: verify %s: %w", ch.name, err)
		}
		for rows.Next() {
			var detail string
			if err := rows.Scan(&detail); err != nil {
				rows.Close()
				return nil, err
			}
			out = append(out, Violation{ch.name, detail})
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// payoutCauses are the ledger causes of outgoing money's transactions,
// each caused by an outgoing attempt of a payout (its id in cause_id).
const payoutCauses = `('payout_reserve', 'payout_settle', 'payout_release', 'payout_reserve_carry')`

// causeAttempt is the attempt id a transaction's cause_id names (NULL when
// it is not a UUID).
const causeAttempt = `(CASE WHEN t.cause_id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
	THEN t.cause_id::uuid END)`

// effectOrphanSQL: a payout effect whose cause is no outgoing attempt of a
// payout moved a merchant's money for nothing saldo sent.
const effectOrphanSQL = `SELECT format('ledger transaction %s (%s) names %s, no outgoing attempt of a payout', t.id, t.cause_kind, t.cause_id)
	FROM ledger_transactions t
	WHERE t.cause_kind IN ` + payoutCauses + ` AND NOT EXISTS (SELECT 1 FROM attempts a JOIN payouts p ON p.id = a.subject_id
		WHERE a.id = ` + causeAttempt + ` AND a.direction = 'out')
	ORDER BY t.id`

// effectLegsSQL: each payout effect moves exactly the payout's amount
// between the accounts its kind names (reserveSpecs, settleSpecs with the
// attempt's provider and clearing shard, releaseSpecs; a carry from the
// reserved account to itself), as charges' credit_legs checks a credit.
var effectLegsSQL = `WITH eff AS (
		SELECT t.id AS tx, t.cause_kind AS kind, p.merchant_id, p.currency, p.amount, a.provider,
		       get_byte(uuid_send(a.id), 0) % ` + clearingShardsSQL + ` AS shard
		FROM ledger_transactions t
		JOIN attempts a ON a.id = ` + causeAttempt + ` AND a.direction = 'out'
		JOIN payouts p ON p.id = a.subject_id
		WHERE t.cause_kind IN ` + payoutCauses + `
	), expected AS (
		SELECT tx, 'merchant/' || merchant_id || CASE WHEN kind = 'payout_reserve' THEN '/available/' ELSE '/reserved/' END
		           || currency AS code, -amount AS amount FROM eff
		UNION ALL
		SELECT tx, CASE kind
		           WHEN 'payout_settle' THEN 'provider/' || provider || CASE WHEN shard = 0 THEN '' ELSE '.' || lpad(shard::text, 2, '0') END
		                || '/clearing/' || currency
		           WHEN 'payout_release' THEN 'merchant/' || merchant_id || '/available/' || currency
		           ELSE 'merchant/' || merchant_id || '/reserved/' || currency END, amount FROM eff
	), exp AS (
		SELECT tx, code, sum(amount) AS amount FROM expected GROUP BY 1, 2
	), act AS (
		SELECT e.tx, ac.code, sum(po.amount) AS amount
		FROM eff e JOIN ledger_postings po ON po.transaction_id = e.tx JOIN ledger_accounts ac ON ac.id = po.account_id
		GROUP BY 1, 2
	)
	SELECT format('ledger transaction %s account %s: the payout''s effect moves %s, the ledger %s',
	              coalesce(exp.tx, act.tx), coalesce(exp.code, act.code), coalesce(exp.amount::text, 'nothing'),
	              coalesce(act.amount::text, 'nothing'))
	FROM exp FULL JOIN act ON act.tx = exp.tx AND act.code = exp.code
	WHERE exp.amount IS DISTINCT FROM act.amount
	ORDER BY 1`

// effectReversedSQL: saldo never reverses a payout's effect or a charge's
// credit (a provider's later word is a divergence an operator books); a
// reversal of one gives back money the attempts say moved.
const effectReversedSQL = `SELECT format('ledger transaction %s reverses %s (%s of %s)', r.id, o.id, o.cause_kind, o.cause_id)
	FROM ledger_transactions r JOIN ledger_transactions o ON o.id = r.reverses_id
	WHERE o.cause_kind IN ('payout_reserve', 'payout_settle', 'payout_release', 'payout_reserve_carry', 'charge_credit')
	ORDER BY r.id`

// splitTotalSQL: a split's total and leg count are its legs'.
const splitTotalSQL = `SELECT format('split %s: total %s in %s legs, its legs %s in %s', s.id, s.total, s.leg_count,
	coalesce(sum(p.amount), 0), count(p.id))
	FROM splits s LEFT JOIN payouts p ON p.split_id = s.id
	GROUP BY s.id, s.total, s.leg_count
	HAVING s.total <> coalesce(sum(p.amount), 0) OR s.leg_count <> count(p.id)
	ORDER BY s.id`

var clearingShardsSQL = fmt.Sprint(ClearingShards)

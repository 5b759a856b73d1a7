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
//   - status: a payout is processing exactly when its current attempt is
//     open, succeeded exactly when it is succeeded, failed when failed;
//   - refunds: the succeeded, pending and unknown refunds of a charge never
//     sum to more than the charged amount;
//   - ledger effects: each outgoing attempt that reached a final status has
//     exactly one settle (succeeded) or release (failed) ledger transaction
//     (a failed one may instead carry its reserve to the payout's next
//     attempt), and every attempt has exactly one reserve, its own or
//     carried in.
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
		SELECT p.id, p.status, coalesce(a.status, '<none>')
		FROM payouts p LEFT JOIN attempts a ON a.id = p.current_attempt_id
		WHERE a.id IS NULL -- no current attempt: NOT (...) below would be NULL
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
		FROM charges c JOIN payouts p ON p.charge_id = c.id AND p.kind = 'refund' AND p.status IN ('processing', 'succeeded')
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
	return out, rows.Err()
}

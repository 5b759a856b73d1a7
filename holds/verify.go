package holds

import (
	"context"
	"fmt"

	"github.com/saldo/saldo/ledger"
)

// Violation is one broken holds invariant found by Verify.
type Violation struct {
	Check  string
	Detail string
}

func (v Violation) String() string { return v.Check + ": " + v.Detail }

// causeAttempt is the attempt id a transaction's cause_id names (NULL when
// it is not a UUID).
const causeAttempt = `(CASE WHEN t.cause_id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
	THEN t.cause_id::uuid END)`

// holdsSQL is the rule (KindHolds) on an attempt row a.
const holdsSQL = `((a.direction = 'in' AND a.divergence_kind IN ('dispute', 'reversal'))
	OR (a.direction = 'out' AND a.divergence_kind = 'paid_after_failure'))`

// Verify checks the holds' invariants, for `saldo audit verify`:
//
//   - held_balance: every merchant's held account's balance is the sum, over
//     attempts, of their hold net (hold - release - book): nothing else
//     moves held money;
//   - hold_cause: every hold transaction names an attempt whose divergence
//     holds (an outgoing attempt paid after it failed; an incoming one
//     disputed or reversed), and a release or a booking one whose
//     divergence is settled; at most one release or booking per attempt
//     (holds: the one at the divergence and the top-ups of credits);
//   - hold_net: an attempt's hold net is never negative on any account, and
//     zero once its divergence is settled;
//   - hold_legs: a hold moves each merchant's money from its available
//     account to its held account, a release back, a booking from held to
//     the attempt's provider clearing account, all in one currency;
//   - hold_exceeds: what an attempt's holds hold (held net) from each
//     merchant in each currency is at most what its divergence wants held
//     there now (wantedSQL, the formula Hold and TopUp take from), and no
//     hold ever moved money of a merchant or currency the divergence puts
//     nothing in doubt for (an outgoing attempt whose payout's reserve was
//     never released, a merchant with no share of the charge).
func Verify(ctx context.Context, db ledger.DBTX) ([]Violation, error) {
	var out []Violation
	for _, ch := range []struct{ name, sql string }{
		{"held_balance", heldBalanceSQL}, {"hold_cause", holdCauseSQL}, {"hold_net", holdNetSQL},
		{"hold_legs", holdLegsSQL}, {"hold_exceeds", holdExceedsSQL()},
	} {
		var args []any
		if ch.name == "hold_exceeds" {
			codes, minors := currencyUnits()
			args = []any{[]string{}, codes, minors}
		}
		rows, err := db.Query(ctx, ch.sql, args...)
		if err != nil {
			return nil, fmt.Errorf("holds: verify %s: %w", ch.name, err)
		}
		for rows.Next() {
			var detail string
			if err := rows.Scan(&detail); err != nil {
				rows.Close()
				return nil, fmt.Errorf("holds: verify %s: %w", ch.name, err)
			}
			out = append(out, Violation{ch.name, detail})
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("holds: verify %s: %w", ch.name, err)
		}
	}
	return out, nil
}

const heldBalanceSQL = `
	WITH net AS (
		SELECT po.account_id, sum(po.amount) AS amount
		FROM ledger_transactions t JOIN ledger_postings po ON po.transaction_id = t.id
		WHERE t.cause_kind IN ` + causesSQL + `
		GROUP BY 1
	)
	SELECT format('account %s: balance %s, the holds of its divergences net %s', ac.code, ac.balance, coalesce(n.amount, 0))
	FROM ledger_accounts ac LEFT JOIN net n ON n.account_id = ac.id
	WHERE ac.owner_kind = 'merchant' AND ac.purpose = 'held' AND ac.balance <> coalesce(n.amount, 0)
	ORDER BY ac.code`

const holdCauseSQL = `
	SELECT format('ledger transaction %s (%s of %s): %s', t.id, t.cause_kind, t.cause_id, CASE
		WHEN a.id IS NULL THEN 'names no attempt'
		WHEN a.diverged_at IS NULL THEN 'its attempt (' || a.status || ') has no divergence'
		WHEN NOT ` + holdsSQL + ` THEN 'a ' || a.direction || ' attempt''s divergence of kind ' || a.divergence_kind || ' holds nothing'
		WHEN t.cause_kind <> 'divergence_hold' AND a.divergence_settled_at IS NULL THEN 'its divergence is not settled'
		ELSE 'the attempt has another ' || t.cause_kind || ' transaction' END)
	FROM ledger_transactions t LEFT JOIN attempts a ON a.id = ` + causeAttempt + `
	WHERE t.cause_kind IN ` + causesSQL + `
	  AND (a.id IS NULL OR a.diverged_at IS NULL OR NOT ` + holdsSQL + `
	       OR (t.cause_kind <> 'divergence_hold' AND a.divergence_settled_at IS NULL)
	       OR (t.cause_kind <> 'divergence_hold' AND EXISTS (SELECT 1 FROM ledger_transactions t2
	           WHERE t2.cause_kind = t.cause_kind AND t2.cause_id = t.cause_id AND t2.id <> t.id)))
	ORDER BY t.id`

const holdNetSQL = `
	WITH net AS (
		SELECT t.cause_id, ac.code, sum(po.amount) AS amount
		FROM ledger_transactions t JOIN ledger_postings po ON po.transaction_id = t.id
		JOIN ledger_accounts ac ON ac.id = po.account_id
		WHERE t.cause_kind IN ` + causesSQL + ` AND ac.owner_kind = 'merchant' AND ac.purpose = 'held'
		GROUP BY 1, 2
	)
	SELECT format('attempt %s holds %s on %s%s', n.cause_id, n.amount, n.code,
		CASE WHEN n.amount < 0 THEN ' (below zero: more released or booked than held)' ELSE ' after its divergence was settled' END)
	FROM net n LEFT JOIN attempts a ON a.id::text = n.cause_id
	WHERE n.amount < 0 OR (n.amount <> 0 AND a.divergence_settled_at IS NOT NULL)
	ORDER BY n.cause_id, n.code`

// holdLegsSQL: per transaction and currency, what each merchant's
// available, held and the provider's clearing account may receive: a hold
// debits available and credits held by the same amount per merchant; a
// release the reverse; a booking debits held and credits the attempt's
// provider clearing account (shard 0, ledger.ProviderClearing).
const holdLegsSQL = `
	WITH legs AS (
		SELECT t.id AS tx, t.cause_kind AS kind, t.cause_id, a.provider, po.leg, po.amount, po.currency,
		       ac.owner_kind, ac.owner_id, ac.purpose, ac.currency AS ac_currency, ac.code
		FROM ledger_transactions t JOIN ledger_postings po ON po.transaction_id = t.id
		JOIN ledger_accounts ac ON ac.id = po.account_id
		LEFT JOIN attempts a ON a.id = ` + causeAttempt + `
		WHERE t.cause_kind IN ` + causesSQL + `
	), bad_leg AS (
		SELECT tx, kind, cause_id, format('leg %s moves %s %s on %s', leg, amount, currency, code) AS what
		FROM legs
		WHERE currency <> ac_currency OR NOT CASE
			WHEN owner_kind = 'merchant' AND purpose = 'held' THEN (kind = 'divergence_hold') = (amount > 0)
			WHEN owner_kind = 'merchant' AND purpose = 'available' THEN kind <> 'divergence_hold_book'
				AND (kind = 'divergence_hold_release') = (amount > 0)
			WHEN owner_kind = 'provider' AND purpose = 'clearing' THEN kind = 'divergence_hold_book'
				AND owner_id = provider AND amount > 0
			ELSE false END
	), unbalanced AS (
		SELECT tx, kind, cause_id, format('merchant %s %s: available and held move %s together', owner_id, currency, sum(amount)) AS what
		FROM legs WHERE owner_kind = 'merchant' AND kind <> 'divergence_hold_book'
		GROUP BY tx, kind, cause_id, owner_id, currency HAVING sum(amount) <> 0
	)
	SELECT format('ledger transaction %s (%s of %s): %s', tx, kind, cause_id, what)
	FROM (SELECT * FROM bad_leg UNION ALL SELECT * FROM unbalanced) b
	ORDER BY tx, what`

// holdExceedsSQL: per diverged attempt, merchant and currency its holds
// touched, what they hold against what the divergence wants held now
// (wantedSQL: one formula for the holds and the audit).
func holdExceedsSQL() string {
	return `WITH x AS (` + wantedSQL(`true`) + `)
	SELECT format('attempt %s (%s divergence of %s): its holds hold %s %s of merchant %s, the divergence wants %s held',
		h.id, h.divergence_kind, h.subject_id, h.net, h.currency, h.merchant_id, coalesce(h.wanted, 'nothing'))
	FROM x AS h (id, subject_id, divergence_kind, merchant_id, currency, wanted, net)
	WHERE h.net::numeric <> 0 AND (h.wanted IS NULL OR h.net::numeric > h.wanted::numeric)
	   OR h.wanted IS NULL AND EXISTS (SELECT 1 FROM ledger_transactions t JOIN ledger_postings po ON po.transaction_id = t.id
			JOIN ledger_accounts ac ON ac.id = po.account_id
			WHERE t.cause_kind = 'divergence_hold' AND t.cause_id = h.id::text AND ac.owner_kind = 'merchant'
			  AND ac.purpose = 'held' AND ac.owner_id = h.merchant_id AND ac.currency = h.currency)
	ORDER BY h.id, h.merchant_id, h.currency`
}

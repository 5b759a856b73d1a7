package charges

import (
	"context"
	"fmt"
)

// Violation is one broken charges invariant found by Verify.
type Violation struct {
	Check  string
	Detail string
}

func (v Violation) String() string { return v.Check + ": " + v.Detail }

// Verify checks the invariants that tie charges to attempts and the ledger,
// for `saldo audit verify` and after every test:
//
//   - breakdown: fee + merchant_net + the split amounts = amount;
//   - credit: every paid charge has exactly one charge_credit ledger
//     transaction, the one it names, whose legs are exactly: provider
//     clearing −amount, merchant available +merchant_net, platform fees
//     +fee, each split recipient +its amount (zero shares have no leg);
//   - no credit for an unpaid charge;
//   - attempts: at most one succeeded attempt per charge, and the charge's
//     status agrees with its attempt (processing and awaiting_payment ⇔
//     open; paid ⇔ succeeded; failed and expired ⇔ failed).
func Verify(ctx context.Context, db dbtx) ([]Violation, error) {
	var out []Violation
	collect := func(check, sql string) error {
		rows, err := db.Query(ctx, sql)
		if err != nil {
			return fmt.Errorf("charges: verify %s: %w", check, err)
		}
		defer rows.Close()
		for rows.Next() {
			var detail string
			if err := rows.Scan(&detail); err != nil {
				return err
			}
			out = append(out, Violation{Check: check, Detail: detail})
		}
		return rows.Err()
	}
	checks := []struct{ name, sql string }{
		{"breakdown", `
			SELECT format('charge %s: amount %s <> fee %s + merchant_net %s + splits %s', c.id, c.amount, c.fee,
			              c.merchant_net, coalesce(s.total, 0))
			FROM charges c
			LEFT JOIN (SELECT charge_id, sum(amount) AS total FROM charge_splits GROUP BY 1) s ON s.charge_id = c.id
			WHERE c.amount <> c.fee + c.merchant_net + coalesce(s.total, 0)
			ORDER BY c.id`},
		{"credit_count", `
			SELECT format('charge %s (%s): %s charge_credit transactions', c.id, c.status, count(t.id))
			FROM charges c
			LEFT JOIN ledger_transactions t ON t.cause_kind = 'charge_credit' AND t.cause_id = c.id
			GROUP BY c.id, c.status
			HAVING count(t.id) <> (c.status = 'paid')::int
			ORDER BY c.id`},
		{"credit_orphan", `
			SELECT format('ledger transaction %s credits unknown charge %s', t.id, t.cause_id)
			FROM ledger_transactions t
			WHERE t.cause_kind = 'charge_credit' AND NOT EXISTS (SELECT 1 FROM charges c WHERE c.id = t.cause_id)
			ORDER BY t.id`},
		{"credit_link", `
			SELECT format('charge %s names credit transaction %s, the ledger has %s', c.id, c.credit_tx_id,
			              coalesce(t.id::text, 'none'))
			FROM charges c
			LEFT JOIN ledger_transactions t ON t.cause_kind = 'charge_credit' AND t.cause_id = c.id
			WHERE c.status = 'paid' AND c.credit_tx_id IS DISTINCT FROM t.id
			ORDER BY c.id`},
		{"credit_legs", `
			WITH expected AS (
				SELECT c.id, 'provider/' || c.provider || '/clearing/' || c.currency AS code, -c.amount AS amount
				FROM charges c WHERE c.status = 'paid'
				UNION ALL
				SELECT c.id, 'merchant/' || c.merchant_id || '/available/' || c.currency, c.merchant_net
				FROM charges c WHERE c.status = 'paid' AND c.merchant_net <> 0
				UNION ALL
				SELECT c.id, 'platform/main/fees/' || c.currency, c.fee
				FROM charges c WHERE c.status = 'paid' AND c.fee <> 0
				UNION ALL
				SELECT c.id, 'merchant/' || s.recipient_id || '/available/' || c.currency, s.amount
				FROM charges c JOIN charge_splits s ON s.charge_id = c.id WHERE c.status = 'paid' AND s.amount <> 0
			), exp AS (
				SELECT id, code, sum(amount) AS amount FROM expected GROUP BY 1, 2
			), act AS (
				SELECT t.cause_id AS id, a.code, sum(p.amount) AS amount
				FROM ledger_transactions t
				JOIN ledger_postings p ON p.transaction_id = t.id
				JOIN ledger_accounts a ON a.id = p.account_id
				WHERE t.cause_kind = 'charge_credit'
				GROUP BY 1, 2
			)
			SELECT format('charge %s account %s: expected %s, credit transaction posts %s',
			              coalesce(exp.id, act.id), coalesce(exp.code, act.code),
			              coalesce(exp.amount::text, 'nothing'), coalesce(act.amount::text, 'nothing'))
			FROM exp FULL JOIN act ON act.id = exp.id AND act.code = exp.code
			WHERE exp.amount IS DISTINCT FROM act.amount
			ORDER BY 1`},
		{"succeeded_attempts", `
			SELECT format('charge %s has %s succeeded attempts', subject_id, count(*))
			FROM attempts WHERE kind IN ('card_charge', 'pix_charge') AND status = 'succeeded'
			GROUP BY subject_id HAVING count(*) > 1
			ORDER BY subject_id`},
		{"status", `
			SELECT format('charge %s is %s but its attempt is %s', c.id, c.status, coalesce(a.status, '<none of its own>'))
			FROM charges c LEFT JOIN attempts a ON a.id = c.attempt_id AND a.subject_id = c.id AND a.direction = 'in'
			WHERE a.id IS NULL -- no attempt of its own: NOT (...) below would be NULL
			   OR NOT ((c.status IN ('processing', 'awaiting_payment') AND a.status IN ('pending', 'unknown'))
			        OR (c.status = 'paid' AND a.status = 'succeeded')
			        OR (c.status IN ('failed', 'expired') AND a.status = 'failed'))
			ORDER BY c.id`},
	}
	for _, ch := range checks {
		if err := collect(ch.name, ch.sql); err != nil {
			return nil, err
		}
	}
	return out, nil
}

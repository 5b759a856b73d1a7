package audit

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Refunds checks that every refund belongs to its charge (R21: a refund is
// outgoing money like a payout, bound to the charge it returns; R22: its
// reserve is the charge's merchant's money):
//
//   - charge_match: a refund row has its charge's merchant, currency and
//     provider, and the charge is paid (CreateRefund refuses any other, and
//     a paid charge stays paid, R9); each of the refund's attempts is a
//     refund at the charge's provider; every leg of every ledger transaction
//     its attempts caused (payout_reserve, payout_settle, payout_release,
//     payout_reserve_carry) is in the charge's currency, on the charge's
//     merchant's available or reserved account or, for the settlement, on
//     the charge's provider's clearing account, and the reserve's debit is
//     on the charge's merchant's available account.
//
// payouts' checks compare a refund's ledger effects with the refund row
// (effect_legs) and sum a charge's refunds (refunds); neither looks at the
// charge the row names, so a refund row pointing at another merchant's
// charge, or a charge in another currency, with effects consistent with
// the row, passed: merchant B's money returning merchant A's charge.
//
// The cost is bounded by the refunds, not by the ledger: the refund rows
// come from the payouts_charge index, their attempts from attempts_subject,
// their transactions from ledger_transactions_cause and the legs from
// ledger_postings_leg.
var Refunds = Check{Area: "refunds", Run: func(ctx context.Context, db *pgxpool.Pool) ([]Violation, error) {
	return collect(ctx, db, "refunds", []sqlCheck{{"charge_match", refundChargeMatchSQL}})
}}

// refundChargeMatchSQL lists one line per offending refund row, attempt or
// ledger leg, refund by refund.
const refundChargeMatchSQL = `
	WITH rf AS MATERIALIZED (
		SELECT p.id, p.merchant_id, p.currency, p.provider, p.charge_id,
		       c.merchant_id AS c_merchant, c.currency AS c_currency, c.provider AS c_provider, c.status AS c_status
		FROM payouts p JOIN charges c ON c.id = p.charge_id
		WHERE p.kind = 'refund' AND p.charge_id IS NOT NULL -- the payouts_charge index
	), ra AS MATERIALIZED (
		SELECT rf.*, a.id AS attempt_id, a.kind AS a_kind, a.operation AS a_operation, a.provider AS a_provider
		FROM rf JOIN attempts a ON a.subject_id = rf.id AND a.direction = 'out'
	), bad AS (
		SELECT rf.id AS refund, 0 AS n, 0::bigint AS tx, 0::smallint AS leg,
		       format('refund %s (merchant %s, %s, provider %s) of charge %s (merchant %s, %s, provider %s, %s)',
		              rf.id, rf.merchant_id, rf.currency, rf.provider, rf.charge_id,
		              rf.c_merchant, rf.c_currency, rf.c_provider, rf.c_status) AS detail
		FROM rf
		WHERE rf.merchant_id <> rf.c_merchant OR rf.currency <> rf.c_currency OR rf.provider <> rf.c_provider
		   OR rf.c_status <> 'paid'
		UNION ALL
		SELECT ra.id, 1, 0, 0,
		       format('refund %s of charge %s: attempt %s is a %s (%s) at provider %s, the charge''s provider is %s',
		              ra.id, ra.charge_id, ra.attempt_id, ra.a_kind, ra.a_operation, ra.a_provider, ra.c_provider)
		FROM ra
		WHERE ra.a_kind <> 'refund' OR ra.a_operation <> 'refund' OR ra.a_provider <> ra.c_provider
		UNION ALL
		SELECT ra.id, 2, t.id, po.leg,
		       format('refund %s of charge %s (merchant %s, %s): ledger transaction %s (%s of attempt %s) leg %s moves %s %s on %s',
		              ra.id, ra.charge_id, ra.c_merchant, ra.c_currency, t.id, t.cause_kind, ra.attempt_id, po.leg,
		              po.amount, po.currency, coalesce(ac.code, 'account id ' || po.account_id))
		FROM ra
		JOIN ledger_transactions t ON t.cause_id = ra.attempt_id::text
		     AND t.cause_kind IN ('payout_reserve', 'payout_settle', 'payout_release', 'payout_reserve_carry')
		JOIN ledger_postings po ON po.transaction_id = t.id
		LEFT JOIN ledger_accounts ac ON ac.id = po.account_id
		WHERE po.currency <> ra.c_currency OR ac.currency IS DISTINCT FROM ra.c_currency
		   OR NOT coalesce(CASE
		       -- The reserve's debit is the charge's merchant's available money.
		       WHEN t.cause_kind = 'payout_reserve' AND po.amount < 0::numeric THEN
		           ac.owner_kind = 'merchant' AND ac.owner_id = ra.c_merchant AND ac.purpose = 'available'
		       WHEN ac.owner_kind = 'merchant' THEN
		           ac.owner_id = ra.c_merchant AND ac.purpose IN ('available', 'reserved')
		       -- The settlement credits the charge's provider's clearing
		       -- account, or one of its shards (provider.NN).
		       WHEN ac.owner_kind = 'provider' THEN
		           t.cause_kind = 'payout_settle' AND ac.purpose = 'clearing'
		           AND (ac.owner_id = ra.c_provider
		                OR (left(ac.owner_id, length(ra.c_provider) + 1) = ra.c_provider || '.'
		                    AND substr(ac.owner_id, length(ra.c_provider) + 2) ~ '^[0-9]{2}$'))
		       ELSE false END, false)
	)
	SELECT detail, count(*) OVER () FROM bad ORDER BY refund, n, tx, leg LIMIT $1`

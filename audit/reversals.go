package audit

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Reversals checks what a reversal transaction (reverses_id set, cause
// "reversal") must be for the ledger to replay for an auditor: a
// correction that undoes exactly one transaction, once. No rule names
// reversals; R22 is the rule of the ledger's transactions (each effect
// under its own key, a replay compared with the stored transaction and
// its reversed one) and its audit checks, and saldo's promise is that
// every cent is in a double-entry ledger an auditor can replay:
//
//   - reversal_mirror: its legs are its original's, in the same order, on
//     the same accounts and in the same currencies, with opposite amounts
//     (ledger.Reverse's definition). ledger_post accepts any balanced legs
//     with a reverses_id, so a writer calling it directly could "reverse"
//     a transaction with other accounts or amounts, and every other check
//     would hold (the reversal balances on its own);
//   - reversal_link: a transaction with reverses_id has cause "reversal"
//     naming that id (the API's statement shows the cause id as the
//     reversed transaction), and a "reversal" always has a reverses_id;
//   - reversed_twice: an original is reversed at most once. The unique
//     index ledger_transactions_reverses refuses a second one; the audit
//     does not take the index's presence on trust (as attempts
//     two_succeeded does not).
//
// The cost is bounded by the reversals, not by the ledger: they come from
// the partial index ledger_transactions_reverses (or, for reversal_link's
// unlinked side, ledger_transactions_cause) and their legs and their
// originals' from ledger_postings_leg.
var Reversals = Check{Area: "ledger", Run: func(ctx context.Context, db *pgxpool.Pool) ([]Violation, error) {
	return collect(ctx, db, "ledger", []sqlCheck{
		{"reversal_mirror", reversalMirrorSQL},
		{"reversal_link", reversalLinkSQL},
		{"reversed_twice", reversedTwiceSQL},
	})
}}

// reversalMirrorSQL lists each reversal whose legs are not its original's
// negated, with the legs that differ.
const reversalMirrorSQL = `
	WITH r AS MATERIALIZED (
		SELECT t.id, t.reverses_id FROM ledger_transactions t WHERE t.reverses_id IS NOT NULL
	), o AS (
		SELECT r.id AS rev, p.leg, p.account_id, p.amount, p.currency
		FROM r JOIN ledger_postings p ON p.transaction_id = r.reverses_id
	), v AS (
		SELECT r.id AS rev, p.leg, p.account_id, p.amount, p.currency
		FROM r JOIN ledger_postings p ON p.transaction_id = r.id
	), diff AS (
		SELECT coalesce(o.rev, v.rev) AS rev, coalesce(o.leg, v.leg) AS leg,
		       format('leg %s: original %s, reversal %s', coalesce(o.leg, v.leg),
		              coalesce(o.amount::text || ' ' || o.currency || ' on account ' || o.account_id, 'none'),
		              coalesce(v.amount::text || ' ' || v.currency || ' on account ' || v.account_id, 'none')) AS what
		FROM o FULL JOIN v ON v.rev = o.rev AND v.leg = o.leg
		WHERE o.rev IS NULL OR v.rev IS NULL
		   OR v.account_id <> o.account_id OR v.currency <> o.currency OR v.amount <> -o.amount
	)
	SELECT format('ledger transaction %s reverses %s but is not its negation: %s', d.rev, r.reverses_id,
	              string_agg(d.what, '; ' ORDER BY d.leg)), count(*) OVER ()
	FROM diff d JOIN r ON r.id = d.rev
	GROUP BY d.rev, r.reverses_id
	ORDER BY d.rev LIMIT $1`

// reversalLinkSQL lists transactions whose reverses_id and cause disagree.
const reversalLinkSQL = `
	WITH bad AS (
		SELECT t.id, format('ledger transaction %s reverses %s but its cause is %s %s', t.id, t.reverses_id,
		                    t.cause_kind, t.cause_id) AS detail
		FROM ledger_transactions t
		WHERE t.reverses_id IS NOT NULL AND (t.cause_kind <> 'reversal' OR t.cause_id <> t.reverses_id::text)
		UNION ALL
		SELECT t.id, format('ledger transaction %s has cause reversal of %s but reverses nothing', t.id, t.cause_id)
		FROM ledger_transactions t
		WHERE t.cause_kind = 'reversal' AND t.reverses_id IS NULL
	)
	SELECT detail, count(*) OVER () FROM bad ORDER BY id LIMIT $1`

// reversedTwiceSQL lists originals with more than one reversal.
const reversedTwiceSQL = `
	SELECT format('ledger transaction %s is reversed %s times: by %s', t.reverses_id, count(*),
	              string_agg(t.id::text, ', ' ORDER BY t.id)), count(*) OVER ()
	FROM ledger_transactions t WHERE t.reverses_id IS NOT NULL
	GROUP BY t.reverses_id HAVING count(*) > 1
	ORDER BY t.reverses_id LIMIT $1`

package ledger

import (
	"context"
	"fmt"
	"time"
)

// ViolationKind names one kind of ledger damage Verify detects.
type ViolationKind string

// The kinds of damage Verify reports.
const (
	// ViolationBalanceMismatch: an account's stored balance differs from the
	// sum of its postings, or from the balance after its newest posting.
	ViolationBalanceMismatch ViolationKind = "balance_mismatch"
	// ViolationChainHead: an account's stored chain head (last sequence
	// number, last hash) differs from its newest posting.
	ViolationChainHead ViolationKind = "chain_head_mismatch"
	// ViolationUnbalancedTransaction: a transaction whose postings do not sum
	// to zero per currency, or that has fewer than two postings.
	ViolationUnbalancedTransaction ViolationKind = "unbalanced_transaction"
	// ViolationForbiddenNegative: an account that forbids negatives is, or
	// was at some point of its history, below zero.
	ViolationForbiddenNegative ViolationKind = "forbidden_negative"
	// ViolationSequenceGap: an account's postings are not numbered 1, 2, 3...
	ViolationSequenceGap ViolationKind = "sequence_gap"
	// ViolationBalanceAfter: a posting's balance_after is not the previous
	// posting's balance_after plus its amount.
	ViolationBalanceAfter ViolationKind = "balance_after_mismatch"
	// ViolationHashChain: a posting's hash does not match its content
	// followed by the hash of the account's previous posting (tampering with
	// the posting, or with the one before it).
	ViolationHashChain ViolationKind = "hash_chain_broken"
	// ViolationCurrency: a posting in a currency other than its account's.
	ViolationCurrency ViolationKind = "currency_mismatch"
	// ViolationOrphanPosting: a posting whose account or transaction does
	// not exist.
	ViolationOrphanPosting ViolationKind = "orphan_posting"
	// ViolationTimeOrder: a posting's posted_at is earlier than the previous
	// posting's of the same account (BalanceAt relies on the order).
	ViolationTimeOrder ViolationKind = "posted_at_backwards"
	// ViolationChainGenesis: a v2 account's stored genesis is not the hash
	// of its identity (its code, owner, purpose, currency or allow_negative
	// changed since it was opened, or the genesis did), or an account's
	// chain version is not one Verify knows.
	ViolationChainGenesis ViolationKind = "chain_genesis_mismatch"
	// ViolationMalformedTransaction: a transaction whose cause kind is not
	// a lowercase word (what every write function requires) or whose
	// reversed transaction id is not positive. The v2 chain's input gives
	// only the cause id and the key a length: a cause kind holding '|'
	// could absorb the fields after it, so that another cause and key hash
	// the same (found by review).
	ViolationMalformedTransaction ViolationKind = "malformed_transaction"
)

// AllViolationKinds lists every kind, in report order.
var AllViolationKinds = []ViolationKind{
	ViolationBalanceMismatch, ViolationChainHead, ViolationUnbalancedTransaction,
	ViolationForbiddenNegative, ViolationSequenceGap, ViolationBalanceAfter,
	ViolationHashChain, ViolationCurrency, ViolationOrphanPosting, ViolationTimeOrder,
	ViolationChainGenesis, ViolationMalformedTransaction,
}

// Violation is one piece of damage found by Verify.
type Violation struct {
	Kind ViolationKind
	// AccountCode, TransactionID and Seq locate the damage where they apply
	// (zero values otherwise).
	AccountCode   string
	TransactionID int64
	Seq           int64
	Detail        string
}

func (v Violation) String() string {
	s := string(v.Kind)
	if v.AccountCode != "" {
		s += " account=" + v.AccountCode
	}
	if v.Seq != 0 {
		s += fmt.Sprintf(" seq=%d", v.Seq)
	}
	if v.TransactionID != 0 {
		s += fmt.Sprintf(" tx=%d", v.TransactionID)
	}
	if v.Detail != "" {
		s += ": " + v.Detail
	}
	return s
}

// MaxReportedViolations bounds Report.Violations; Report.Counts counts all.
const MaxReportedViolations = 1000

// Report is the result of Verify.
type Report struct {
	Accounts     int64
	Transactions int64
	Postings     int64
	// Violations lists the damage found (at most MaxReportedViolations).
	Violations []Violation
	// Counts has the number of violations of each kind, listed or not.
	Counts   map[ViolationKind]int64
	Duration time.Duration
}

// OK reports whether no violation was found.
func (r Report) OK() bool {
	for _, n := range r.Counts {
		if n > 0 {
			return false
		}
	}
	return true
}

// Total is the number of violations found.
func (r Report) Total() int64 {
	var t int64
	for _, n := range r.Counts {
		t += n
	}
	return t
}

func (r *Report) add(v Violation) {
	r.Counts[v.Kind]++
	if len(r.Violations) < MaxReportedViolations {
		r.Violations = append(r.Violations, v)
	}
}

// Verify replays the whole ledger and reports every violation of its
// invariants: each account's balance equals the sum of its postings and the
// balance after its newest posting; each transaction has two or more
// postings summing to zero per currency; no account that forbids negatives
// was ever below zero (checked on every balance_after); per-account
// sequences are gap-free; each balance_after is the previous one plus the
// amount; every posting's hash matches its content and chains to the
// previous posting of its account, by the account's chain version (v1:
// the posting alone, from nothing; v2, accounts opened since migration
// 00108: also its transaction's cause, reversed transaction and
// idempotency key, from a genesis hash of the account's identity, so a
// re-attributed transaction or a changed account identity breaks the
// chain); a v2 account's stored genesis is the hash of its identity.
//
// The hash is recomputed by an expression inside Verify's own query, not by
// a function stored in the database, so a replaced database function cannot
// vouch for tampered rows. (A hash chain shows that history was altered; an
// attacker who can rewrite a whole chain consistently needs an external
// anchor to be caught: a seal, WriteSeal and VerifySeal.)
//
// Each check is one set-based statement, so each sees one consistent
// snapshot and Verify can run while the ledger takes writes. Given a
// REPEATABLE READ transaction, all checks see the same snapshot.
func Verify(ctx context.Context, db DBTX) (Report, error) {
	start := time.Now()
	rep := Report{Counts: map[ViolationKind]int64{}}
	for _, k := range AllViolationKinds {
		rep.Counts[k] = 0
	}
	if err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM ledger_accounts),
		(SELECT count(*) FROM ledger_transactions), (SELECT count(*) FROM ledger_postings)`).
		Scan(&rep.Accounts, &rep.Transactions, &rep.Postings); err != nil {
		return rep, fmt.Errorf("ledger: verify: counts: %w", err)
	}
	if err := verifyPostings(ctx, db, &rep); err != nil {
		return rep, err
	}
	if err := verifyAccounts(ctx, db, &rep); err != nil {
		return rep, err
	}
	if err := verifyTransactions(ctx, db, &rep); err != nil {
		return rep, err
	}
	rep.Duration = time.Since(start)
	return rep, nil
}

// The checks compare numerics with numeric literals (0::numeric, not 0):
// pg_catalog has no numeric-integer operator, and an operator with that
// exact signature created in a schema on the auditor's search path would
// be chosen over pg_catalog's numeric one reached through a cast, and could
// call an unbalanced transaction balanced (TestVerifyIgnoresPlantedOperators_R23).

// genesisSQL is a v2 account's genesis hash, recomputed from the identity
// columns of the ledger_accounts row a (migration 00108): the chain of its
// postings starts from it, and so does its head while it has none. Verify
// never trusts the genesis stored on the row for the chain, only reports
// when it differs (ViolationChainGenesis).
const genesisSQL = `sha256(convert_to(concat_ws('|', 'saldo-ledger-account-v2', a.id, a.code,
	a.owner_kind, a.owner_id, a.purpose, a.currency, a.allow_negative), 'UTF8'))`

// postingHashSQL is the hash posting p must have, given the hash of the
// previous posting of its account (prev, NULL for the first) and of its
// account a's chain version: v1 (accounts opened before migration 00108)
// covers the posting alone and starts from the empty string; v2 also covers
// its transaction t's cause, reversed transaction and idempotency key (free
// text, each after its length) and starts from the account's genesis.
func postingHashSQL(prev string) string {
	return `CASE WHEN coalesce(a.chain_version, 1) = 1
		THEN sha256(convert_to(concat_ws('|', 'saldo-ledger-posting-v1',
			p.account_id, p.seq, p.transaction_id, p.leg,
			trim_scale(p.amount)::text, p.currency, trim_scale(p.balance_after)::text,
			(extract(epoch FROM p.posted_at) * 1000000)::bigint), 'UTF8')
			|| coalesce(` + prev + `, '\x'::bytea))
		ELSE sha256(convert_to(concat_ws('|', 'saldo-ledger-posting-v2',
			p.account_id, p.seq, p.transaction_id, p.leg,
			trim_scale(p.amount)::text, p.currency, trim_scale(p.balance_after)::text,
			(extract(epoch FROM p.posted_at) * 1000000)::bigint,
			t.cause_kind, coalesce(t.reverses_id, 0), length(t.cause_id), t.cause_id,
			length(t.idempotency_key), t.idempotency_key), 'UTF8')
			|| coalesce(` + prev + `, ` + genesisSQL + `))
		END`
}

// verifyPostings walks every account's history in sequence order once.
func verifyPostings(ctx context.Context, db DBTX, rep *Report) error {
	rows, err := db.Query(ctx, `
		SELECT code, seq, transaction_id, gap, bad_after, negative, bad_hash, bad_currency,
		       orphan, backwards, prev_seq, amount::text, balance_after::text, prev_after::text
		FROM (
			SELECT coalesce(a.code, 'account id ' || p.account_id) AS code, p.seq, p.transaction_id, p.amount, p.balance_after,
			       lag(p.seq) OVER w AS prev_seq,
			       lag(p.balance_after) OVER w AS prev_after,
			       p.seq <> coalesce(lag(p.seq) OVER w, 0) + 1 AS gap,
			       coalesce(p.posted_at < lag(p.posted_at) OVER w, false) AS backwards,
			       p.balance_after <> coalesce(lag(p.balance_after) OVER w, 0) + p.amount AS bad_after,
			       coalesce(NOT a.allow_negative AND p.balance_after < 0::numeric, false) AS negative,
			       coalesce(p.hash <> `+postingHashSQL("lag(p.hash) OVER w")+`, true) AS bad_hash,
			       coalesce(p.currency <> a.currency, false) AS bad_currency,
			       a.id IS NULL OR t.id IS NULL AS orphan
			FROM ledger_postings p
			LEFT JOIN ledger_accounts a ON a.id = p.account_id
			LEFT JOIN ledger_transactions t ON t.id = p.transaction_id
			WINDOW w AS (PARTITION BY p.account_id ORDER BY p.seq)
		) x
		WHERE gap OR bad_after OR negative OR bad_hash OR bad_currency OR orphan OR backwards`)
	if err != nil {
		return fmt.Errorf("ledger: verify: postings: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			code                                               string
			seq, tx                                            int64
			gap, badAfter, negative, badHash, bc, orphan, back bool
			prevSeq                                            *int64
			amount, after                                      string
			prevAfter                                          *string
		)
		if err := rows.Scan(&code, &seq, &tx, &gap, &badAfter, &negative, &badHash, &bc,
			&orphan, &back, &prevSeq, &amount, &after, &prevAfter); err != nil {
			return fmt.Errorf("ledger: verify: postings: %w", err)
		}
		v := Violation{AccountCode: code, Seq: seq, TransactionID: tx}
		if gap {
			v.Kind, v.Detail = ViolationSequenceGap, fmt.Sprintf("seq %d follows %s", seq, orNone(prevSeq, "nothing (want 1)"))
			rep.add(v)
		}
		if badAfter {
			v.Kind, v.Detail = ViolationBalanceAfter, fmt.Sprintf("balance_after %s, but previous %s + amount %s", after, orNone(prevAfter, "0"), amount)
			rep.add(v)
		}
		if negative {
			v.Kind, v.Detail = ViolationForbiddenNegative, fmt.Sprintf("balance_after %s in an account that forbids negatives", after)
			rep.add(v)
		}
		if badHash {
			v.Kind, v.Detail = ViolationHashChain, "hash does not match the posting's content (with its transaction's cause and key, chain v2) and the previous posting's hash (the account's genesis, chain v2, for the first)"
			rep.add(v)
		}
		if bc {
			v.Kind, v.Detail = ViolationCurrency, "posting currency differs from the account's"
			rep.add(v)
		}
		if orphan {
			v.Kind, v.Detail = ViolationOrphanPosting, "the posting's account or transaction does not exist"
			rep.add(v)
		}
		if back {
			v.Kind, v.Detail = ViolationTimeOrder, "posted_at is earlier than the previous posting's"
			rep.add(v)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("ledger: verify: postings: %w", err)
	}
	return nil
}

func orNone[T any](p *T, none string) string {
	if p == nil {
		return none
	}
	return fmt.Sprint(*p)
}

// verifyAccounts compares each account row with its history.
func verifyAccounts(ctx context.Context, db DBTX, rep *Report) error {
	rows, err := db.Query(ctx, `
		SELECT code, balance, total, last_after, last_seq, max_seq, bad_balance, bad_head, negative,
		       merchant_may_go_negative, bad_genesis, chain_version
		FROM (
			SELECT a.code, a.balance::text, coalesce(s.total, 0)::text AS total,
			       coalesce(lp.balance_after::text, '') AS last_after,
			       a.last_seq, coalesce(s.max_seq, 0) AS max_seq, a.chain_version,
			       a.balance <> coalesce(s.total, 0)
			           OR (a.last_seq > 0 AND lp.balance_after IS DISTINCT FROM a.balance) AS bad_balance,
			       -- An account without postings has its chain's start as
			       -- its head: nothing (v1) or its genesis (v2).
			       a.last_seq <> coalesce(s.max_seq, 0)
			           OR a.last_hash IS DISTINCT FROM coalesce(lp.hash,
			               CASE WHEN a.chain_version = 1 THEN '\x'::bytea ELSE `+genesisSQL+` END) AS bad_head,
			       (NOT a.allow_negative OR a.owner_kind = 'merchant') AND a.balance < 0::numeric AS negative,
			       a.owner_kind = 'merchant' AND a.allow_negative AS merchant_may_go_negative,
			       CASE a.chain_version
			           WHEN 1 THEN a.chain_genesis IS NOT NULL
			           WHEN 2 THEN a.chain_genesis IS DISTINCT FROM `+genesisSQL+`
			           ELSE true END AS bad_genesis
			FROM ledger_accounts a
			LEFT JOIN (SELECT account_id, sum(amount) AS total, max(seq) AS max_seq
			           FROM ledger_postings GROUP BY account_id) s ON s.account_id = a.id
			LEFT JOIN ledger_postings lp ON lp.account_id = a.id AND lp.seq = a.last_seq
		) x
		WHERE bad_balance OR bad_head OR negative OR merchant_may_go_negative OR bad_genesis`)
	if err != nil {
		return fmt.Errorf("ledger: verify: accounts: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			code, balance, total, lastAfter string
			lastSeq, maxSeq                 int64
			badBalance, badHead, negative   bool
			merchantMayGoNegative           bool
			badGenesis                      bool
			version                         int16
		)
		if err := rows.Scan(&code, &balance, &total, &lastAfter, &lastSeq, &maxSeq, &badBalance, &badHead, &negative,
			&merchantMayGoNegative, &badGenesis, &version); err != nil {
			return fmt.Errorf("ledger: verify: accounts: %w", err)
		}
		if badBalance {
			rep.add(Violation{Kind: ViolationBalanceMismatch, AccountCode: code,
				Detail: fmt.Sprintf("balance %s, postings sum to %s, newest balance_after %q", balance, total, lastAfter)})
		}
		if badHead {
			rep.add(Violation{Kind: ViolationChainHead, AccountCode: code,
				Detail: fmt.Sprintf("account says last seq %d, postings end at %d (or last hash differs)", lastSeq, maxSeq)})
		}
		if negative {
			rep.add(Violation{Kind: ViolationForbiddenNegative, AccountCode: code,
				Detail: fmt.Sprintf("balance %s in an account that forbids negatives", balance)})
		}
		if merchantMayGoNegative {
			// A merchant's accounts never go negative (MerchantAvailable,
			// MerchantReserved, MerchantPending): the flag stored on the
			// row is not trusted to say otherwise (found by review).
			rep.add(Violation{Kind: ViolationForbiddenNegative, AccountCode: code,
				Detail: "a merchant's account is marked allow_negative"})
		}
		if badGenesis {
			d := fmt.Sprintf("chain v%d: the stored genesis is not the hash of the account's identity (code, owner, purpose, currency, allow_negative changed since it was opened?)", version)
			switch version {
			case 1:
				d = "chain v1 account carries a genesis (a v2 account turned v1?)"
			case 2:
			default:
				d = fmt.Sprintf("unknown chain version %d", version)
			}
			rep.add(Violation{Kind: ViolationChainGenesis, AccountCode: code, Detail: d})
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("ledger: verify: accounts: %w", err)
	}
	return nil
}

// verifyTransactions checks double entry per transaction.
func verifyTransactions(ctx context.Context, db DBTX, rep *Report) error {
	rows, err := db.Query(ctx, `
		SELECT t.id, coalesce(sum(x.n), 0),
		       coalesce(string_agg(x.currency || ' ' || x.total::text, ', ' ORDER BY x.currency)
		                FILTER (WHERE x.total <> 0::numeric), '')
		FROM ledger_transactions t
		LEFT JOIN (SELECT transaction_id, currency, sum(amount) AS total, count(*) AS n
		           FROM ledger_postings GROUP BY transaction_id, currency) x ON x.transaction_id = t.id
		GROUP BY t.id
		HAVING coalesce(sum(x.n), 0::numeric) < 2::numeric OR bool_or(x.total <> 0::numeric)
		ORDER BY t.id`)
	if err != nil {
		return fmt.Errorf("ledger: verify: transactions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id, n int64
			sums  string
		)
		if err := rows.Scan(&id, &n, &sums); err != nil {
			return fmt.Errorf("ledger: verify: transactions: %w", err)
		}
		d := fmt.Sprintf("%d postings", n)
		if sums != "" {
			d += ", non-zero sums: " + sums
		}
		rep.add(Violation{Kind: ViolationUnbalancedTransaction, TransactionID: id, Detail: d})
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("ledger: verify: transactions: %w", err)
	}
	return verifyTransactionFields(ctx, db, rep)
}

// verifyTransactionFields reports transactions whose cause kind or
// reversed id no write function would have written
// (ViolationMalformedTransaction).
func verifyTransactionFields(ctx context.Context, db DBTX, rep *Report) error {
	rows, err := db.Query(ctx, `SELECT id, left(cause_kind, 60), coalesce(reverses_id::text, '') FROM ledger_transactions
		WHERE cause_kind !~ '^[a-z][a-z0-9_]{0,39}$' OR reverses_id <= 0 ORDER BY id`)
	if err != nil {
		return fmt.Errorf("ledger: verify: transaction fields: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var kind, reverses string
		if err := rows.Scan(&id, &kind, &reverses); err != nil {
			return fmt.Errorf("ledger: verify: transaction fields: %w", err)
		}
		rep.add(Violation{Kind: ViolationMalformedTransaction, TransactionID: id,
			Detail: fmt.Sprintf("cause kind %q, reverses %q: not what the ledger's write functions write", kind, reverses)})
	}
	return rows.Err()
}

// Package holds holds a merchant's money while a divergence against it is
// open (docs/rules.md R9, R19, R21, R22), and lets the operator's settlement
// release it or book it.
//
// A divergence is the provider contradicting a final attempt (package
// attempts, recordDivergence). Some divergences mean that the merchant's
// available balance overstates what it has:
//
//   - an outgoing attempt (payout, Pix transfer, refund, split leg) the
//     provider paid after saldo resolved it failed (paid_after_failure): its
//     reserve went back to available, and the money left all the same;
//   - an incoming charge attempt disputed (a chargeback) or reversed after it
//     succeeded: its credit put shares in merchants' available balances (the
//     merchant's net, each split recipient's share; not the platform's fee)
//     that the card network took back or that never arrived.
//
// What such a divergence WANTS held is computed from the attempt, now
// (wantedSQL, the one formula): for an outgoing attempt, the payout's amount
// once the payout's reserve was released by any of its attempts (nothing
// while a next attempt still holds the carried reserve); for an incoming
// one, each share its credit gave (the merchant's net, each split
// recipient's share; never the platform's fee) times (amount - refunds
// that count against the charge: processing or succeeded) / amount,
// rounded down to the currency's minor units.
//
// The transaction that records the divergence moves, per merchant, what it
// wants from the merchant's available account to its held account
// (ledger.MerchantHeld; cause divergence_hold, cause id the attempt id, key
// divergence_hold:<attempt id>), at most what is available, read under the
// account's row lock: available never goes negative, and a shortfall is
// written in the hold's metadata and logged at ERROR. Later, every
// transaction that credits a merchant's available balance tops up
// (TopUp) the open short divergences that want that merchant's money in
// that currency, oldest first, in the same transaction as the credit:
//
//   - a payout's release (a failed attempt's reserve going back to
//     available: payouts' AttemptsFinal, one by one or batched), which
//     also tops up the divergences it concerns whoever's money they want:
//     another attempt of the same payout paid after it failed, for a
//     refund its charge's dispute or reversal;
//   - a charge's credit (its attempt succeeded: charges' AttemptsFinal,
//     one by one or batched): the merchant's net and each split
//     recipient's share;
//   - a positive funding (merchants.Fund, the one path that books one:
//     POST /v1/merchants/{id}/fundings, `saldo dev`'s seed, the benches).
//
// Each moves min(wanted - held net so far, available) (key
// divergence_hold:<attempt id>:<the credit>: the releasing attempt's id,
// the charge's attempt id, or the funding's ledger key, FundingBy). A
// payout's success, a negative funding and a hold's release at its
// settlement top up nothing; a replayed funding neither. A credit and a
// divergence committing in the same instant can miss each other (the
// credit's statement did not see the divergence yet, the hold read the
// balance before the credit): that hold stays short until the next
// credit. What stays short (the merchant paid the money out and nothing
// came in since) is for the operator (docs/runbook.md). Payouts
// reserve from available only: held money cannot be paid out. Other kinds
// hold nothing (a payout's reversal: the ledger shows money left that came
// back, available does not overstate; a second operation; a charge paid
// after it failed: never credited).
//
// Settling the divergence (attempts.Service.SettleDivergence) decides what
// the hold still holds: release (held -> available, cause
// divergence_hold_release) or book (held -> the attempt's provider clearing
// account, cause divergence_hold_book), in the settlement's transaction.
//
// One place decides the legs and the amounts: the owners (payouts,
// charges, merchants) only say when (Hold at the divergence, TopUp at a
// credit); Hold, TopUp and Settle post them from wantedSQL, and Verify
// checks them against the same formula for `saldo audit verify`.
package holds

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/internal/pgtext"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
)

// Ledger causes of the holds' transactions; each cause id is the diverged
// attempt's id and each idempotency key is "<cause>:<attempt id>" (a
// top-up's: "divergence_hold:<attempt id>:<releasing attempt id>").
const (
	// CauseHold: available -> held, in the divergence's transaction.
	CauseHold = "divergence_hold"
	// CauseRelease: held -> available, at the settlement ("hold": "release").
	CauseRelease = "divergence_hold_release"
	// CauseBook: held -> the attempt's provider clearing account, at the
	// settlement ("hold": "book"): the money is gone.
	CauseBook = "divergence_hold_book"
)

// Causes lists the three causes, as SQL (for the checks).
const causesSQL = `('divergence_hold', 'divergence_hold_release', 'divergence_hold_book')`

// Holds reports whether a's divergence holds money: an outgoing attempt
// paid after it failed, an incoming one disputed or reversed.
func Holds(a attempts.Attempt) bool {
	kind, err := divergenceKindOf(a)
	if err != nil {
		return false
	}
	return KindHolds(incoming(a.Kind), kind)
}

// KindHolds is the rule by direction (in: a charge's attempt) and
// divergence kind.
func KindHolds(in bool, kind string) bool {
	if in {
		return kind == attempts.DivergenceDispute || kind == attempts.DivergenceReversal
	}
	return kind == attempts.DivergencePaidAfterFailure
}

func incoming(k attempts.Kind) bool {
	return k == attempts.KindCardCharge || k == attempts.KindPixCharge
}

func divergenceKindOf(a attempts.Attempt) (string, error) {
	if a.DivergenceKind == "" {
		return "", errors.New("holds: attempt has no divergence kind")
	}
	return a.DivergenceKind, nil
}

// Hold adds to postings the hold of a's divergence (a locked in tx, its
// divergence just recorded): when its kind holds (Holds), what it wants held
// from each merchant (wanted) moves from the merchant's available account to
// its held account (key divergence_hold:<attempt id>), capped at the
// available balance read under the row lock when postings is posted
// (ledger.Deferred.AddLocked: every account of the transaction is locked in
// one id order), less what an earlier part of postings already held for it.
// Nothing is posted when nothing is left to hold. A shortfall is in the
// transaction's metadata and description and logged at ERROR. what names
// the divergence's subject for humans ("payout po_1").
func Hold(ctx context.Context, tx pgx.Tx, log *slog.Logger, a attempts.Attempt, what string, postings *ledger.Deferred) error {
	if !Holds(a) {
		return nil
	}
	return hold(ctx, tx, log, []target{{id: a.ID, key: CauseHold + ":" + a.ID.String(), what: what}}, nil, postings)
}

// Credit is money credited to a merchant's available balance in the
// transaction that tops up, by a cause TopUp knows: TopUp's input.
type Credit struct {
	// Cause: CreditRelease, CreditCharge or CreditFunding.
	Cause CreditCause
	// By names what credited in each top-up's key
	// (divergence_hold:<diverged attempt id>:<By>) and metadata: the
	// failed attempt whose reserve a release gives back, the charge's
	// succeeded attempt, a funding's ledger key (FundingBy).
	By string
	// PayoutID: a release's payout; ChargeID: the charge a released
	// refund refunds ("" unless a refund's release). Both "" for a charge's
	// credit and a funding.
	PayoutID string
	ChargeID string
	// MerchantID and Currency: whose available balance it credits.
	MerchantID string
	Currency   money.Currency
}

// CreditCause is what credits a merchant's available balance.
type CreditCause string

// The causes that top up (TopUp).
const (
	// CreditRelease: a payout's reserve going back to available (a failed
	// attempt's payout_release); By is the failed attempt's id.
	CreditRelease CreditCause = "payout_release"
	// CreditCharge: a charge's credit (its attempt succeeded): the
	// merchant's net or a split recipient's share; By is the attempt's id.
	CreditCharge CreditCause = "charge_credit"
	// CreditFunding: a positive funding adjustment; By is FundingBy of its
	// ledger key.
	CreditFunding CreditCause = "funding"
)

// maxLedgerKey is the ledger's longest idempotency key, in bytes.
const maxLedgerKey = 255

// FundingBy is a funding's Credit.By, from the funding's ledger key
// (unique across merchants, "funding:<merchant>:<key>"): the key itself
// when divergence_hold:<attempt id>:<key> fits the ledger's 255 bytes,
// else "funding-sha256:<hex of the key>" (a form no funding key takes).
func FundingBy(ledgerKey string) string {
	if len(CauseHold)+1+36+1+len(ledgerKey) <= maxLedgerKey {
		return ledgerKey
	}
	sum := sha256.Sum256([]byte(ledgerKey))
	return "funding-sha256:" + hex.EncodeToString(sum[:])
}

// TopUp adds to postings, after the credits' own transactions (added to
// postings before it), a further hold for every open divergence those
// credits concern. For a payout's release: (a) an attempt of the same
// payout paid after it failed (its payout's reserve, carried to the
// releasing attempt, is free only now); (b) when the payout refunds a
// charge, the charge's attempt disputed or reversed (the refund no longer
// counts against the charge: more of its credit is in doubt). For every
// credit (a release, a charge's credit to its merchant or a split
// recipient, a funding): (c) any other open holding divergence that wants
// money of the credited merchant in that currency (a payout's attempt of
// the merchant paid after it failed; a charge disputed or reversed whose
// credit gave the merchant a share: its own charge or a split
// recipient's), so that money coming to available fills a short hold
// before it can be paid out (R9, R21, R22). Each moves min(wanted - held
// net so far, available) per merchant, oldest divergence (attempt id)
// first (key divergence_hold:<diverged attempt id>:<By of its first
// credit>, cause divergence_hold, cause id the diverged attempt). One
// statement finds and locks them all (topUpSQL); nothing is asked when
// credits is empty (a payout's success credits nothing). For a release,
// the caller holds each releasing attempt's and payout's row; every caller
// takes topUpSQL's locks before any ledger account's (postings locks them
// at its Post).
func TopUp(ctx context.Context, tx pgx.Tx, log *slog.Logger, credits []Credit, postings *ledger.Deferred) error {
	if len(credits) == 0 {
		return nil
	}
	n := len(credits)
	payouts, by, charges := make([]string, n), make([]string, n), make([]string, n)
	merchants, currencies := make([]string, n), make([]string, n)
	var released []string
	causes := make(map[string]CreditCause, n)
	for i, c := range credits {
		payouts[i], by[i], charges[i] = c.PayoutID, c.By, c.ChargeID
		merchants[i], currencies[i] = c.MerchantID, c.Currency.Code()
		if c.Cause == CreditRelease {
			released = append(released, c.By)
		}
		causes[c.By] = c.Cause
	}
	rows, err := tx.Query(ctx, topUpSQL, payouts, by, charges, merchants, currencies)
	if err != nil {
		return fmt.Errorf("holds: divergences concerned by %d credits: %w", n, err)
	}
	targets, err := topUpTargets(rows, causes, nil)
	if err != nil {
		return fmt.Errorf("holds: divergences concerned by %d credits: %w", n, err)
	}
	if len(targets) == 0 {
		return nil
	}
	return hold(ctx, tx, log, targets, released, postings)
}

// topUpSQL finds, in one statement, the divergences a batch of credits
// concerns ($1 releases' payouts or empty, $2 the credits' By, $3 refunded
// charges or empty, $4 merchants, $5 currencies; one row per credit) and
// locks what serialises each top-up with the divergence's settlement and
// with another credit's top-up of it: one row per divergence and credit
// (id, By, subject, holding), in id order. Every caller runs it before
// its transaction locks any ledger account (the lock order everywhere:
// attempt rows, then payout rows, then the accounts in id order), and it
// locks the other payouts' rows (lout) before the charges' attempts (lin):
// a release holds its own payout's row when it runs this statement, so a
// funding's or a charge's top-up that took a charge's diverged attempt
// first and then waited for that payout would close a cycle
// (docs/pitfalls.md).
//
//   - own (a): the releasing payout's other attempts, read, not locked: the
//     caller holds the payout's row (payouts' attemptsFinalSQL moved it),
//     and every transaction that records a divergence of a payout's attempt
//     or settles one locks the payout's row after the attempt's (the
//     owner's attempts.SubjectLocker): one that committed first is seen by
//     this statement's snapshot, a later one waits for this transaction.
//     Locking the attempts here would deadlock with a divergence that holds
//     its attempt and waits for the payout (docs/pitfalls.md).
//   - in (b, c): a refunded charge's attempts whether diverged or not, and
//     every open dispute or reversal of a charge whose credit gave the
//     credited merchant a share in that currency: locked (lin, FOR UPDATE,
//     id order), the divergence read from the locked row (a condition on
//     it in the WHERE would read the statement's snapshot). A dispute
//     recorded concurrently on a refunded charge (which never takes the
//     refund's payout row) either waits for this transaction (and its hold
//     then sees the refund failed) or is seen here once it committed; a
//     settlement (which reads what the hold holds) and this top-up do not
//     cross; two credits' top-ups of one divergence take turns (a
//     funding's or a charge's credit waits there for a release's top-up,
//     and the other way round). Locked after lout.
//   - out (c): open paid_after_failure divergences of the merchant's other
//     payouts in that currency (not the batch's releases': those are own):
//     their payout's row is locked (lout, FOR UPDATE, id order, before
//     lin), where the divergence's settlement, its payout's own release
//     (own, above) and another credit's top-up of it meet; whether it is
//     still open is read after the lock (wanted, a later statement, skips
//     a settled one).
//
// The open divergences (od) are read once from the partial index of open
// divergences (attempts_diverged: diverged_at IS NOT NULL AND
// divergence_settled_at IS NULL, the review queue's): a few rows, joined
// to their payout or charge by primary key (OFFSET 0: the planner keeps
// the open divergences outside); a merchant's many payouts are never
// scanned.
const topUpSQL = `WITH r AS (
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) AS r(payout, by, charge, merchant, currency)
	), od AS MATERIALIZED (
		SELECT a.id, a.direction, a.subject_id FROM attempts a
		WHERE a.diverged_at IS NOT NULL AND a.divergence_settled_at IS NULL AND ` + holdsSQL + `
	), c AS (
		SELECT od.id, r.by, od.subject_id, 'own' AS how FROM od JOIN r ON od.subject_id = r.payout AND od.direction = 'out'
		WHERE od.id::text <> r.by
		UNION ALL
		SELECT a.id, r.by, a.subject_id, 'in' FROM attempts a JOIN r ON r.charge <> '' AND a.subject_id = r.charge AND a.direction = 'in'
		UNION ALL
		SELECT od.id, r.by, od.subject_id, 'out' FROM od
		CROSS JOIN LATERAL (SELECT p.merchant_id, p.currency FROM payouts p WHERE od.direction = 'out' AND p.id = od.subject_id OFFSET 0) p
		JOIN r ON p.merchant_id = r.merchant AND p.currency = r.currency
		WHERE od.subject_id <> ALL ($1::text[])
		UNION ALL
		SELECT od.id, r.by, od.subject_id, 'in' FROM od JOIN charges ch ON od.direction = 'in' AND ch.id = od.subject_id AND ch.attempt_id = od.id
		JOIN r ON ch.currency = r.currency AND (ch.merchant_id = r.merchant
			OR EXISTS (SELECT 1 FROM charge_splits s WHERE s.charge_id = ch.id AND s.recipient_id = r.merchant))
	), lout AS (
		SELECT p.id FROM payouts p
		WHERE p.id IN (SELECT subject_id FROM c WHERE how = 'out')
		ORDER BY p.id FOR UPDATE
	), lin AS (
		SELECT a.id, (a.diverged_at IS NOT NULL AND a.divergence_settled_at IS NULL AND ` + holdsSQL + `) AS holding
		FROM attempts a WHERE a.id IN (SELECT id FROM c WHERE how = 'in') AND (SELECT count(*) FROM lout) >= 0
		ORDER BY a.id FOR UPDATE
	), li AS (SELECT count(*) FROM lin)
	SELECT c.id, c.by, c.subject_id, CASE WHEN c.how = 'in' THEN coalesce(l.holding, false) ELSE true END
	FROM c LEFT JOIN lin l ON l.id = c.id
	WHERE (SELECT count FROM li) >= 0
	ORDER BY c.id, c.by`

// topUpTargets appends to targets a top-up for each holding divergence of
// rows (id, By, subject, holding; in id order): one per divergence, keyed
// by its first credit (causes: each By's cause).
func topUpTargets(rows pgx.Rows, causes map[string]CreditCause, targets []target) ([]target, error) {
	var id uuid.UUID
	var trigger, subject string
	var holding bool
	_, err := pgx.ForEachRow(rows, []any{&id, &trigger, &subject, &holding}, func() error {
		if n := len(targets); !holding || (n > 0 && targets[n-1].id == id) {
			return nil
		}
		targets = append(targets, target{id: id, key: CauseHold + ":" + id.String() + ":" + trigger, what: subject,
			trigger: trigger, cause: causes[trigger]})
		return nil
	})
	return targets, err
}

// target is one hold transaction to build: the diverged attempt, the
// transaction's key, its subject for humans, the credit that triggered a
// top-up (its By and cause; "" for the hold at the divergence).
type target struct {
	id                 uuid.UUID
	key, what, trigger string
	cause              CreditCause
}

// topUpNote is what a top-up's metadata and description say of the
// credit that triggered it.
func (t target) topUpNote(meta map[string]string) string {
	meta["topped_up_by"] = string(t.cause)
	switch t.cause {
	case CreditRelease:
		meta["released_by_attempt"] = t.trigger
		return " (topped up: attempt " + t.trigger + " released a reserve)"
	case CreditCharge:
		meta["credited_by_attempt"] = t.trigger
		return " (topped up: charge attempt " + t.trigger + " credited the merchant)"
	default:
		meta["funding"] = t.trigger
		return " (topped up: funding " + t.trigger + ")"
	}
}

// want is a divergence's doubt on one merchant in one currency: what it
// wants held (Wanted; nil when it puts nothing in doubt there) and what its
// holds hold now (held net: hold - release - book).
type want struct {
	attempt            uuid.UUID
	subject, kind      string
	merchant           string
	cur                money.Currency
	wanted             *decimal.Decimal
	net                decimal.Decimal
	available, heldAcc int64
}

// hold builds, for each target, the move of min(wanted - held, available)
// per merchant (held: its held net plus what earlier parts of postings
// hold for it), one transaction per target.
func hold(ctx context.Context, tx pgx.Tx, log *slog.Logger, targets []target, released []string, postings *ledger.Deferred) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ids := make([]string, len(targets))
	for i, t := range targets {
		ids[i] = t.id.String()
	}
	// Only open divergences: a top-up's candidate of another payout is read
	// as open before its payout's row was locked (topUpSQL, lout); its
	// settlement may have committed in between.
	all, err := wanted(ctx, tx, ids, released, true)
	if err != nil {
		return err
	}
	byAttempt := map[uuid.UUID][]*want{}
	var accounts []int64
	for i := range all {
		w := &all[i]
		if w.wanted == nil || !w.wanted.GreaterThan(w.net) {
			continue
		}
		av, err := ledger.EnsureAccount(ctx, tx, ledger.MerchantAvailable(w.merchant, w.cur))
		if err != nil {
			return fmt.Errorf("holds: attempt %s: %w", w.attempt, err)
		}
		he, err := ledger.EnsureAccount(ctx, tx, ledger.MerchantHeld(w.merchant, w.cur))
		if err != nil {
			return fmt.Errorf("holds: attempt %s: %w", w.attempt, err)
		}
		w.available, w.heldAcc = av.ID, he.ID
		accounts = append(accounts, av.ID, he.ID)
		byAttempt[w.attempt] = append(byAttempt[w.attempt], w)
	}
	if len(accounts) == 0 {
		return nil
	}
	postings.AddLocked(accounts, func(bal map[int64]decimal.Decimal, before []ledger.TransactionInput) ([]ledger.TransactionInput, error) {
		// What earlier parts of this transaction already hold for each
		// attempt on each held account (a top-up and the divergence's own
		// hold in one record batch).
		pending := map[string]decimal.Decimal{}
		for _, in := range before {
			if !strings.HasPrefix(in.CauseKind, CauseHold) {
				continue
			}
			for _, leg := range in.Postings {
				k := fmt.Sprintf("%s/%d", in.CauseID, leg.AccountID)
				pending[k] = pending[k].Add(leg.Amount)
			}
		}
		var out []ledger.TransactionInput
		for _, t := range targets {
			ws := byAttempt[t.id]
			if len(ws) == 0 {
				continue
			}
			var legs []ledger.PostingInput
			var short []string
			wantedSum, heldSum := decimal.Zero, decimal.Zero
			kind := ws[0].kind
			meta := map[string]string{"attempt_id": t.id.String(), "subject_id": ws[0].subject, "divergence_kind": kind}
			note := ""
			if t.trigger != "" {
				note = t.topUpNote(meta)
			}
			var cur money.Currency
			for _, w := range ws {
				cur = w.cur
				have := w.net.Add(pending[fmt.Sprintf("%s/%d", t.id, w.heldAcc)])
				take := decimal.Min(w.wanted.Sub(have), decimal.Max(bal[w.available], decimal.Zero))
				if take.IsPositive() {
					legs = append(legs, ledger.PostingInput{AccountID: w.available, Amount: take.Neg(), Currency: w.cur},
						ledger.PostingInput{AccountID: w.heldAcc, Amount: take, Currency: w.cur})
					bal[w.available] = bal[w.available].Sub(take)
					bal[w.heldAcc] = bal[w.heldAcc].Add(take)
				} else {
					take = decimal.Zero
				}
				wantedSum, heldSum = wantedSum.Add(*w.wanted), heldSum.Add(have).Add(take)
				if miss := w.wanted.Sub(have).Sub(take); miss.IsPositive() {
					short = append(short, fmt.Sprintf("%s %s", w.merchant, miss))
					if len(meta) < 60 {
						meta["shortfall:"+w.merchant] = miss.String()
					}
				}
			}
			meta["wanted"], meta["held"] = wantedSum.String(), heldSum.String()
			shortfall := wantedSum.Sub(heldSum)
			if shortfall.IsPositive() {
				meta["shortfall"] = shortfall.String()
				log.ErrorContext(ctx, "divergence hold short: the merchant's available balance no longer covers what the divergence puts in doubt; "+
					"the operator must recover the shortfall", "attempt_id", t.id, "subject", t.what, "divergence_kind", kind,
					"currency", cur.Code(), "wanted", wantedSum.String(), "held", heldSum.String(), "shortfall", shortfall.String(),
					"short_by_merchant", strings.Join(short, ", "), "topped_up_by", string(t.cause), "credit", t.trigger)
			}
			if len(legs) == 0 {
				continue
			}
			desc := fmt.Sprintf("divergence (%s) of attempt %s of %s: %s %s held of %s wanted", kind, t.id, t.what, heldSum, cur.Code(), wantedSum)
			desc += note
			if shortfall.IsPositive() {
				desc += fmt.Sprintf("; SHORTFALL %s %s (%s) to recover", shortfall, cur.Code(), strings.Join(short, ", "))
			}
			out = append(out, ledger.TransactionInput{
				IdempotencyKey: t.key,
				CauseKind:      CauseHold,
				CauseID:        t.id.String(),
				Description:    pgtext.Truncate(desc, 1000),
				Metadata:       meta,
				Postings:       legs,
			})
		}
		return out, nil
	}, nil, func(ts []ledger.Transaction) error {
		for _, t := range ts {
			log.WarnContext(ctx, "divergence hold posted: the merchant's money is held until the divergence is settled",
				"attempt_id", t.CauseID, "ledger_tx", t.ID)
		}
		return nil
	})
	return nil
}

// wanted is what the divergences of ids want held and hold now, per
// merchant and currency (wantedSQL); released: attempts whose
// payout_release this transaction posts after the statement.
func wanted(ctx context.Context, db ledger.DBTX, ids, released []string, open bool) ([]want, error) {
	codes, minors := currencyUnits()
	if released == nil {
		released = []string{}
	}
	filter := `a.id = ANY ($4::uuid[])`
	if open {
		filter += ` AND a.divergence_settled_at IS NULL`
	}
	rows, err := db.Query(ctx, wantedSQL(filter)+` ORDER BY 1, 4, 5`, released, codes, minors, ids)
	if err != nil {
		return nil, fmt.Errorf("holds: what %d divergences want held: %w", len(ids), err)
	}
	var out []want
	var w want
	var cur, net string
	var amt *string
	if _, err := pgx.ForEachRow(rows, []any{&w.attempt, &w.subject, &w.kind, &w.merchant, &cur, &amt, &net}, func() error {
		var err error
		if w.cur, err = money.LookupCurrency(cur); err != nil {
			return err
		}
		if w.net, err = decimal.NewFromString(net); err != nil {
			return err
		}
		w.wanted = nil
		if amt != nil {
			d, err := decimal.NewFromString(*amt)
			if err != nil {
				return err
			}
			w.wanted = &d
		}
		out = append(out, w)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("holds: what %d divergences want held: %w", len(ids), err)
	}
	return out, nil
}

// currencyUnits is every currency's code and minor units, for wantedSQL's
// rounding.
func currencyUnits() ([]string, []int32) {
	var codes []string
	var minors []int32
	for _, c := range money.Currencies() {
		codes, minors = append(codes, c.Code()), append(minors, c.MinorUnits())
	}
	return codes, minors
}

// wantedSQL is THE formula of what a holding divergence wants held (Hold,
// TopUp, Settle's shortfall and the audit's hold_exceeds all use it), for
// the diverged attempts a filter selects: one row per attempt, merchant and
// currency with what it wants (NULL: it puts nothing in doubt there) and
// what its holds hold (held net). $1: attempts whose payout_release the
// caller's transaction posts later ('{}' otherwise); $2, $3: currency codes
// and their minor units.
//
//   - an outgoing attempt paid after it failed: its payout's amount from
//     the payout's merchant, once the payout's reserve was released by ANY
//     attempt of the payout (a failed attempt whose reserve was carried to
//     the next holds nothing while that one holds the reserve);
//   - an incoming attempt disputed or reversed, the one that credited its
//     paid charge: each share its credit gave (the merchant's net, each
//     split recipient's share; never the fee) times (amount - refunds that
//     count against the charge) / amount, rounded down to the currency's
//     minor units. A refund counts when it is processing or succeeded
//     (payouts' refundTakesSQL, without its failed-but-paid case: such a
//     refund's own divergence holds its amount) and was created no later
//     than the divergence (a refund created after it, which the provider
//     would refuse, changes nothing here).
func wantedSQL(filter string) string {
	return `WITH mu AS (SELECT * FROM unnest($2::text[], $3::int[]) AS m(code, minor)),
	d AS (
		SELECT a.id, a.direction, a.subject_id, a.divergence_kind, a.diverged_at FROM attempts a
		WHERE (` + filter + `) AND a.diverged_at IS NOT NULL AND ` + holdsSQL + `
	), want AS (
		SELECT d.id, p.merchant_id, p.currency, p.amount
		FROM d JOIN payouts p ON d.direction = 'out' AND p.id = d.subject_id
		WHERE EXISTS (SELECT 1 FROM attempts s WHERE s.subject_id = p.id AND s.direction = 'out'
			AND (s.id = ANY ($1::uuid[]) OR EXISTS (SELECT 1 FROM ledger_transactions r
				WHERE r.cause_kind = 'payout_release' AND r.cause_id = s.id::text)))
		UNION ALL
		SELECT d.id, x.merchant_id, c.currency, trunc(x.amount * (c.amount - r.taken) / c.amount, mu.minor)
		FROM d JOIN charges c ON d.direction = 'in' AND c.id = d.subject_id AND c.status = 'paid' AND c.attempt_id = d.id
		JOIN mu ON mu.code = c.currency
		CROSS JOIN LATERAL (SELECT coalesce(sum(p.amount), 0) AS taken FROM payouts p
			WHERE p.charge_id = c.id AND p.kind = 'refund' AND p.status IN ('processing', 'succeeded')
			  AND p.created_at <= d.diverged_at) r
		CROSS JOIN LATERAL (SELECT c.merchant_id, c.merchant_net AS amount
			UNION ALL SELECT s.recipient_id, s.amount FROM charge_splits s WHERE s.charge_id = c.id) x
	), wanted AS (
		SELECT id, merchant_id, currency, sum(amount) AS amount FROM want GROUP BY 1, 2, 3
	), net AS (
		SELECT d.id, ac.owner_id AS merchant_id, ac.currency, sum(po.amount) AS amount
		FROM d JOIN ledger_transactions t ON t.cause_kind IN ` + causesSQL + ` AND t.cause_id = d.id::text
		JOIN ledger_postings po ON po.transaction_id = t.id
		JOIN ledger_accounts ac ON ac.id = po.account_id
		WHERE ac.owner_kind = 'merchant' AND ac.purpose = 'held'
		GROUP BY 1, 2, 3
	), k AS (
		SELECT id, merchant_id, currency FROM wanted UNION SELECT id, merchant_id, currency FROM net
	)
	SELECT k.id, d.subject_id, d.divergence_kind, k.merchant_id, k.currency, w.amount::text, coalesce(n.amount, 0)::text
	FROM k JOIN d ON d.id = k.id
	LEFT JOIN wanted w ON w.id = k.id AND w.merchant_id = k.merchant_id AND w.currency = k.currency
	LEFT JOIN net n ON n.id = k.id AND n.merchant_id = k.merchant_id AND n.currency = k.currency`
}

// Held is what an attempt's hold still holds on one merchant's held account.
type Held struct {
	AccountID  int64
	MerchantID string
	Currency   money.Currency
	Amount     decimal.Decimal
}

// Open is what attempt id's hold still holds, per held account (held net:
// hold - release - book), accounts in id order; nothing when it holds
// nothing.
func Open(ctx context.Context, db ledger.DBTX, id string) ([]Held, error) {
	rows, err := db.Query(ctx, `SELECT ac.id, ac.owner_id, ac.currency, sum(po.amount)::text
		FROM ledger_transactions t
		JOIN ledger_postings po ON po.transaction_id = t.id
		JOIN ledger_accounts ac ON ac.id = po.account_id
		WHERE t.cause_kind IN `+causesSQL+` AND t.cause_id = $1
		  AND ac.owner_kind = 'merchant' AND ac.purpose = 'held'
		GROUP BY 1, 2, 3 HAVING sum(po.amount) <> 0 ORDER BY 1`, id)
	if err != nil {
		return nil, fmt.Errorf("holds: open hold of %s: %w", id, err)
	}
	var out []Held
	var h Held
	var cur, amt string
	if _, err := pgx.ForEachRow(rows, []any{&h.AccountID, &h.MerchantID, &cur, &amt}, func() error {
		var err error
		if h.Currency, err = money.LookupCurrency(cur); err != nil {
			return err
		}
		if h.Amount, err = decimal.NewFromString(amt); err != nil {
			return err
		}
		out = append(out, h)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("holds: open hold of %s: %w", id, err)
	}
	return out, nil
}

// Settle does with what a's hold still holds what the operator decided, in
// the settlement's transaction tx (a locked in it, its divergence not
// settled yet): attempts.DivergenceSettleOwner's SettleDivergenceHold.
// release: held -> available, per merchant; book: held -> the attempt's
// provider clearing account (ledger.ProviderClearing). It returns the note
// (what was held, what was done), ErrHoldUndecided (as ErrInvalid, naming
// the amount; nothing done) when money is held and no decision was given.
func Settle(ctx context.Context, tx pgx.Tx, log *slog.Logger, a attempts.Attempt, decision attempts.HoldDecision) (string, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	open, err := Open(ctx, tx, a.ID.String())
	if err != nil {
		return "", err
	}
	if len(open) == 0 {
		if decision == attempts.HoldNone {
			return "", nil
		}
		return fmt.Sprintf("hold %s asked; nothing is held, nothing moved", decision), nil
	}
	var parts []string
	byCur := map[money.Currency]decimal.Decimal{}
	for _, h := range open {
		if h.Amount.IsNegative() {
			return "", fmt.Errorf("holds: attempt %s: held account %d of merchant %s is %s below zero for it", a.ID, h.AccountID, h.MerchantID, h.Amount.Neg())
		}
		parts = append(parts, fmt.Sprintf("%s %s of merchant %s", h.Amount.StringFixed(h.Currency.MinorUnits()), h.Currency.Code(), h.MerchantID))
		byCur[h.Currency] = byCur[h.Currency].Add(h.Amount)
	}
	held := strings.Join(parts, ", ")
	if short, err := shortfallOf(ctx, tx, a.ID.String()); err != nil {
		return "", err
	} else if short != "" {
		held += " (short of what was in doubt by " + short + ", to recover outside saldo)"
	}
	if decision == attempts.HoldNone {
		return "", fmt.Errorf("%w: %w: the divergence of attempt %s holds %s: settle it with \"hold\": \"release\" "+
			"(give it back to available) or \"book\" (the money is gone)", attempts.ErrInvalid, attempts.ErrHoldUndecided, a.ID, held)
	}
	var legs []ledger.PostingInput
	cause, done := CauseRelease, "released to the merchant's available balance"
	if decision == attempts.HoldBook {
		cause = CauseBook
	}
	for _, h := range open {
		legs = append(legs, ledger.PostingInput{AccountID: h.AccountID, Amount: h.Amount.Neg(), Currency: h.Currency})
		if decision == attempts.HoldRelease {
			av, err := ledger.EnsureAccount(ctx, tx, ledger.MerchantAvailable(h.MerchantID, h.Currency))
			if err != nil {
				return "", fmt.Errorf("holds: settle %s: %w", a.ID, err)
			}
			legs = append(legs, ledger.PostingInput{AccountID: av.ID, Amount: h.Amount, Currency: h.Currency})
		}
	}
	if decision == attempts.HoldBook {
		var codes []string
		curs := make([]money.Currency, 0, len(byCur))
		for c := range byCur {
			curs = append(curs, c)
		}
		sort.Slice(curs, func(i, j int) bool { return curs[i].Code() < curs[j].Code() })
		for _, c := range curs {
			cl, err := ledger.EnsureAccount(ctx, tx, ledger.ProviderClearing(a.Provider, c))
			if err != nil {
				return "", fmt.Errorf("holds: settle %s: %w", a.ID, err)
			}
			legs = append(legs, ledger.PostingInput{AccountID: cl.ID, Amount: byCur[c], Currency: c})
			codes = append(codes, cl.Code)
		}
		done = "booked as gone to " + strings.Join(codes, ", ")
	}
	if _, err := ledger.Post(ctx, tx, ledger.TransactionInput{
		IdempotencyKey: cause + ":" + a.ID.String(),
		CauseKind:      cause,
		CauseID:        a.ID.String(),
		Description:    pgtext.Truncate(fmt.Sprintf("divergence of attempt %s settled: %s held, %s", a.ID, held, done), 1000),
		Metadata:       map[string]string{"attempt_id": a.ID.String(), "subject_id": a.SubjectID, "decision": string(decision)},
		Postings:       legs,
	}); err != nil {
		return "", fmt.Errorf("holds: settle %s (%s): %w", a.ID, decision, err)
	}
	log.InfoContext(ctx, "divergence hold settled", "attempt_id", a.ID, "decision", string(decision), "held", held)
	return fmt.Sprintf("hold: %s held, %s", held, done), nil
}

// shortfallOf is what the divergence of attempt id wants held and its
// holds do not hold ("" when nothing): the shortfall the operator recovers
// outside saldo.
func shortfallOf(ctx context.Context, db ledger.DBTX, id string) (string, error) {
	ws, err := wanted(ctx, db, []string{id}, nil, false)
	if err != nil {
		return "", err
	}
	var parts []string
	for _, w := range ws {
		if w.wanted == nil {
			continue
		}
		if miss := w.wanted.Sub(w.net); miss.IsPositive() {
			parts = append(parts, fmt.Sprintf("%s %s of merchant %s", miss.StringFixed(w.cur.MinorUnits()), w.cur.Code(), w.merchant))
		}
	}
	return strings.Join(parts, ", "), nil
}

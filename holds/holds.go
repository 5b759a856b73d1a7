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
// For those, the transaction that records the divergence also moves each
// share from the merchant's available account to its held account
// (ledger.MerchantHeld; cause divergence_hold, cause id the attempt id, key
// divergence_hold:<attempt id>), at most what is available, read under the
// account's row lock: available never goes negative, and a shortfall (the
// merchant paid part of it out before) is written in the hold's metadata and
// logged at ERROR for the operator to recover. Payouts reserve from
// available only: held money cannot be paid out. Other kinds hold nothing (a
// payout's reversal: the ledger shows money left that came back, available
// does not overstate; a second operation; a charge paid after it failed:
// never credited).
//
// Settling the divergence (attempts.Service.SettleDivergence) decides what
// the hold still holds: release (held -> available, cause
// divergence_hold_release) or book (held -> the attempt's provider clearing
// account, cause divergence_hold_book), in the settlement's transaction.
//
// One place decides the legs: the owners (payouts, charges) say only which
// shares the divergence puts in doubt (Share); Hold and Settle post them,
// and Verify checks them for `saldo audit verify`.
package holds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
)

// Ledger causes of the holds' transactions; each cause id is the diverged
// attempt's id and each idempotency key is "<cause>:<attempt id>".
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

// Share is a merchant's money a divergence puts in doubt: what the
// attempt's effect put in (or gave back to) its available balance.
type Share struct {
	MerchantID string
	Amount     decimal.Decimal
}

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
// divergence just recorded): when its kind holds (Holds), each merchant's
// share in cur moves from its available account to its held account, capped
// at the available balance read under the row lock when postings is posted
// (ledger.Deferred.AddLocked: every account of the transaction is locked in
// one id order). Shares of one merchant are added together; zero shares are
// not posted, and when nothing is left to hold no transaction is. A
// shortfall is in the transaction's metadata and description and logged at
// ERROR. what names the divergence's subject for humans ("payout po_1").
func Hold(ctx context.Context, tx pgx.Tx, log *slog.Logger, a attempts.Attempt, cur money.Currency, shares []Share,
	what string, postings *ledger.Deferred) error {
	if !Holds(a) {
		return nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	byMerchant := map[string]decimal.Decimal{}
	for _, sh := range shares {
		if sh.Amount.IsNegative() {
			return fmt.Errorf("holds: attempt %s: negative share %s of merchant %s", a.ID, sh.Amount, sh.MerchantID)
		}
		if !sh.Amount.IsZero() {
			byMerchant[sh.MerchantID] = byMerchant[sh.MerchantID].Add(sh.Amount)
		}
	}
	if len(byMerchant) == 0 {
		return nil
	}
	merchants := make([]string, 0, len(byMerchant))
	for m := range byMerchant {
		merchants = append(merchants, m)
	}
	sort.Strings(merchants)
	type acc struct{ available, held int64 }
	accs := make([]acc, len(merchants))
	var ids []int64
	for i, m := range merchants {
		av, err := ledger.EnsureAccount(ctx, tx, ledger.MerchantAvailable(m, cur))
		if err != nil {
			return fmt.Errorf("holds: attempt %s: %w", a.ID, err)
		}
		he, err := ledger.EnsureAccount(ctx, tx, ledger.MerchantHeld(m, cur))
		if err != nil {
			return fmt.Errorf("holds: attempt %s: %w", a.ID, err)
		}
		accs[i] = acc{av.ID, he.ID}
		ids = append(ids, av.ID, he.ID)
	}
	kind, _ := divergenceKindOf(a)
	postings.AddLocked(ids, func(bal map[int64]decimal.Decimal) ([]ledger.TransactionInput, error) {
		var legs []ledger.PostingInput
		wanted, held := decimal.Zero, decimal.Zero
		meta := map[string]string{"attempt_id": a.ID.String(), "subject_id": a.SubjectID, "divergence_kind": kind}
		var short []string
		for i, m := range merchants {
			want := byMerchant[m]
			take := decimal.Min(want, decimal.Max(bal[accs[i].available], decimal.Zero))
			wanted, held = wanted.Add(want), held.Add(take)
			if take.IsPositive() {
				legs = append(legs, ledger.PostingInput{AccountID: accs[i].available, Amount: take.Neg(), Currency: cur},
					ledger.PostingInput{AccountID: accs[i].held, Amount: take, Currency: cur})
			}
			if take.LessThan(want) {
				miss := want.Sub(take)
				short = append(short, fmt.Sprintf("%s %s", m, miss))
				if len(meta) < 60 {
					meta["shortfall:"+m] = miss.String()
				}
			}
		}
		meta["wanted"], meta["held"] = wanted.String(), held.String()
		shortfall := wanted.Sub(held)
		if shortfall.IsPositive() {
			meta["shortfall"] = shortfall.String()
			log.ErrorContext(ctx, "divergence hold short: the merchant's available balance no longer covers what the divergence puts in doubt; "+
				"the operator must recover the shortfall", "attempt_id", a.ID, "subject", what, "divergence_kind", kind,
				"currency", cur.Code(), "wanted", wanted.String(), "held", held.String(), "shortfall", shortfall.String(),
				"short_by_merchant", strings.Join(short, ", "))
		}
		if len(legs) == 0 {
			return nil, nil
		}
		desc := fmt.Sprintf("divergence (%s) of attempt %s of %s: %s %s held of %s wanted", kind, a.ID, what, held, cur.Code(), wanted)
		if shortfall.IsPositive() {
			desc += fmt.Sprintf("; SHORTFALL %s %s (%s) to recover", shortfall, cur.Code(), strings.Join(short, ", "))
		}
		return []ledger.TransactionInput{{
			IdempotencyKey: CauseHold + ":" + a.ID.String(),
			CauseKind:      CauseHold,
			CauseID:        a.ID.String(),
			Description:    truncate(desc, 1000),
			Metadata:       meta,
			Postings:       legs,
		}}, nil
	}, nil, func(ts []ledger.Transaction) error {
		if len(ts) == 0 {
			return nil
		}
		log.WarnContext(ctx, "divergence hold posted: the merchant's money is held until the divergence is settled",
			"attempt_id", a.ID, "subject", what, "divergence_kind", kind, "currency", cur.Code(), "ledger_tx", ts[0].ID)
		return nil
	})
	return nil
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
		Description:    truncate(fmt.Sprintf("divergence of attempt %s settled: %s held, %s", a.ID, held, done), 1000),
		Metadata:       map[string]string{"attempt_id": a.ID.String(), "subject_id": a.SubjectID, "decision": string(decision)},
		Postings:       legs,
	}); err != nil {
		return "", fmt.Errorf("holds: settle %s (%s): %w", a.ID, decision, err)
	}
	log.InfoContext(ctx, "divergence hold settled", "attempt_id", a.ID, "decision", string(decision), "held", held)
	return fmt.Sprintf("hold: %s held, %s", held, done), nil
}

// shortfallOf is the shortfall the hold of attempt id recorded ("" when
// none).
func shortfallOf(ctx context.Context, db ledger.DBTX, id string) (string, error) {
	var short *string
	err := db.QueryRow(ctx, `SELECT metadata->>'shortfall' FROM ledger_transactions
		WHERE cause_kind = $1 AND cause_id = $2`, CauseHold, id).Scan(&short)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && short == nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("holds: shortfall of %s: %w", id, err)
	}
	return *short, nil
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n])
}

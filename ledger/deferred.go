package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
)

// Deferred gathers the transactions that several writers of one database
// transaction prepare, and posts them together with one PostMany: every
// account any of them touches is then locked once, in the one id order
// PostMany uses, whichever writer named it. Two writers that each posted
// their own transactions would lock two sets of accounts one after the
// other, and a transaction locking the union in id order (an opening batch,
// a Poster batch) could then deadlock against them (docs/pitfalls.md: every writer
// of several owners' rows in one transaction takes all its row locks in one
// global order).
//
// The attempts core gives one to the owners of a record batch's final
// attempts (payouts' settles and releases, charges' credits) and posts it
// after the last of them. The zero Deferred is ready to use.
type Deferred struct {
	ins    []TransactionInput
	parts  []deferredPart
	posted bool
	// locked: some part is built from balances (AddLocked).
	locked bool
}

type deferredPart struct {
	from, to int // ins[from:to]
	refused  func(i int, err error) error
	then     func(ts []Transaction) error
	// accounts and build: an AddLocked part, built at Post (from and to
	// are set then).
	accounts []int64
	build    func(balances map[int64]decimal.Decimal, before []TransactionInput) ([]TransactionInput, error)
}

// ErrDeferredPosted is Add's or Post's error after Post.
var ErrDeferredPosted = errors.New("ledger: deferred transactions already posted")

// Add defers ins. Once Post has posted everything, then (if not nil) runs
// with the transactions of ins, in order, inside the same database
// transaction. If PostMany refuses ins[i], refused (if not nil) turns the
// refusal (what Post would have returned) into Post's error.
func (d *Deferred) Add(ins []TransactionInput, refused func(i int, err error) error, then func(ts []Transaction) error) {
	if d.posted {
		panic(ErrDeferredPosted)
	}
	from := len(d.ins)
	d.ins = append(d.ins, ins...)
	d.parts = append(d.parts, deferredPart{from: from, to: len(d.ins), refused: refused, then: then})
}

// AddLocked defers the transactions build makes from the balances of
// accounts (ids), read under their row locks: Post first locks every
// account of every deferred transaction and of accounts, in id order, in
// one statement (the order PostMany uses, so nothing else is locked in
// another order), then calls build with each of accounts' balance as it
// will be once the transactions deferred before this part are posted (and
// with those transactions, before, in order: what this transaction will
// have posted by then), and posts what build returns in this part's place,
// with the others, in one PostMany. It is for postings capped at a balance
// (a divergence's hold takes at most what is available, less what an
// earlier part already held for it). then and refused are Add's.
func (d *Deferred) AddLocked(accounts []int64, build func(balances map[int64]decimal.Decimal, before []TransactionInput) ([]TransactionInput, error),
	refused func(i int, err error) error, then func(ts []Transaction) error) {
	if d.posted {
		panic(ErrDeferredPosted)
	}
	d.locked = true
	d.parts = append(d.parts, deferredPart{accounts: accounts, build: build, refused: refused, then: then})
}

// Len is how many transactions are deferred (those AddLocked will build
// are not counted).
func (d *Deferred) Len() int { return len(d.ins) }

// buildLocked locks every account the deferred transactions and the
// AddLocked parts name, in id order, reads their balances, and builds the
// AddLocked parts in order, each from the balances the parts before it
// leave: d.ins and the parts' ranges are then final.
func (d *Deferred) buildLocked(ctx context.Context, tx pgx.Tx) error {
	var ids []int64
	var codes []string
	for _, p := range d.parts {
		ids = append(ids, p.accounts...)
		if p.build == nil {
			ids, codes = legAccounts(d.ins[p.from:p.to], ids, codes)
		}
	}
	// ledger_lock_accounts (migration 00100) locks them in id order, as the
	// ledger's owner: the application role may not SELECT FOR UPDATE. The
	// balances read next, in a new statement, are the ones under the locks.
	if _, err := tx.Exec(ctx, lockAccountsSQL, ids, codes); err != nil {
		return fmt.Errorf("ledger: lock deferred accounts: %w", err)
	}
	rows, err := tx.Query(ctx, `SELECT id, code, balance::text FROM ledger_accounts WHERE id = ANY ($1::bigint[])
		UNION ALL SELECT id, code, balance::text FROM ledger_accounts WHERE code = ANY ($2::text[])`, ids, codes)
	if err != nil {
		return fmt.Errorf("ledger: read deferred accounts: %w", err)
	}
	balances := map[int64]decimal.Decimal{}
	byCode := map[string]int64{}
	var id int64
	var code, bal string
	if _, err := pgx.ForEachRow(rows, []any{&id, &code, &bal}, func() error {
		b, err := decimal.NewFromString(bal)
		balances[id], byCode[code] = b, id
		return err
	}); err != nil {
		return fmt.Errorf("ledger: lock deferred accounts: %w", err)
	}
	apply := func(ins []TransactionInput) {
		for _, in := range ins {
			for _, leg := range in.Postings {
				id := leg.AccountID
				if id == 0 {
					id = byCode[leg.AccountCode]
				}
				balances[id] = balances[id].Add(leg.Amount)
			}
		}
	}
	var ins []TransactionInput
	for i := range d.parts {
		p := &d.parts[i]
		var part []TransactionInput
		if p.build == nil {
			part = d.ins[p.from:p.to]
		} else {
			seen := make(map[int64]decimal.Decimal, len(p.accounts))
			for _, a := range p.accounts {
				b, ok := balances[a]
				if !ok {
					return fmt.Errorf("%w: id %d", ErrAccountNotFound, a)
				}
				seen[a] = b
			}
			if part, err = p.build(seen, ins[:len(ins):len(ins)]); err != nil {
				return err
			}
		}
		apply(part)
		p.from = len(ins)
		ins = append(ins, part...)
		p.to = len(ins)
	}
	d.ins = ins
	return nil
}

// Post posts every deferred transaction in tx with one PostMany, in the
// order they were added, then runs the Add callbacks in that order. It
// posts at most once. Any error leaves tx to be rolled back.
func (d *Deferred) Post(ctx context.Context, tx pgx.Tx) error {
	if d.posted {
		return ErrDeferredPosted
	}
	d.posted = true
	if d.locked {
		if err := d.buildLocked(ctx, tx); err != nil {
			return err
		}
	}
	if len(d.ins) == 0 {
		return nil
	}
	ts, err := PostMany(ctx, tx, d.ins)
	if err != nil {
		var be *BatchError
		if errors.As(err, &be) {
			for _, p := range d.parts {
				if be.Index >= p.from && be.Index < p.to && p.refused != nil {
					return p.refused(be.Index-p.from, be.Err)
				}
			}
		}
		return fmt.Errorf("ledger: post %d deferred transactions: %w", len(d.ins), err)
	}
	for _, p := range d.parts {
		if p.then == nil {
			continue
		}
		if err := p.then(ts[p.from:p.to]); err != nil {
			return err
		}
	}
	return nil
}

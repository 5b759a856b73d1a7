package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
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
}

type deferredPart struct {
	from, to int // ins[from:to]
	refused  func(i int, err error) error
	then     func(ts []Transaction) error
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

// Len is how many transactions are deferred.
func (d *Deferred) Len() int { return len(d.ins) }

// Post posts every deferred transaction in tx with one PostMany, in the
// order they were added, then runs the Add callbacks in that order. It
// posts at most once. Any error leaves tx to be rolled back.
func (d *Deferred) Post(ctx context.Context, tx pgx.Tx) error {
	if d.posted {
		return ErrDeferredPosted
	}
	d.posted = true
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

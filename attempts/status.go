package attempts

import (
	"fmt"

	"github.com/saldo/saldo/providers"
)

// Kind is what an attempt realises. It selects the Owner called when the
// attempt reaches a final status.
type Kind string

// The kinds of attempt saldo makes.
const (
	KindPayout      Kind = "payout"       // bank payout or Pix payout of a merchant balance
	KindPixTransfer Kind = "pix_transfer" // a Pix transfer to a third party
	KindRefund      Kind = "refund"       // money back to the payer of a charge
	KindSplitLeg    Kind = "split_leg"    // one leg of a split payout
	KindCardCharge  Kind = "card_charge"  // money in: a card capture
	KindPixCharge   Kind = "pix_charge"   // money in: a Pix cob paid later
)

// Kinds lists every kind.
var Kinds = []Kind{KindPayout, KindPixTransfer, KindRefund, KindSplitLeg, KindCardCharge, KindPixCharge}

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool {
	_, ok := kindOperations[k]
	return ok
}

// kindOperations is which provider operations may realise each kind.
var kindOperations = map[Kind][]providers.Operation{
	KindPayout:      {providers.OpBankPayout, providers.OpPixTransfer, providers.OpAccountTransfer},
	KindPixTransfer: {providers.OpPixTransfer},
	KindRefund:      {providers.OpRefund},
	KindSplitLeg:    {providers.OpPixTransfer, providers.OpBankPayout, providers.OpAccountTransfer},
	KindCardCharge:  {providers.OpCardCharge},
	KindPixCharge:   {providers.OpPixCharge},
}

// Allows reports whether op may realise an attempt of kind k.
func (k Kind) Allows(op providers.Operation) bool {
	for _, o := range kindOperations[k] {
		if o == op {
			return true
		}
	}
	return false
}

// Status of an attempt (R1, R9).
type Status string

// Attempt statuses. Pending and unknown are open; succeeded and failed are
// final and never change again.
const (
	StatusPending   Status = "pending"
	StatusSucceeded Status = "succeeded"
	StatusFailed    Status = "failed"
	StatusUnknown   Status = "unknown"
)

// Statuses lists every status.
var Statuses = []Status{StatusPending, StatusSucceeded, StatusFailed, StatusUnknown}

// Valid reports whether s is a known status.
func (s Status) Valid() bool {
	switch s {
	case StatusPending, StatusSucceeded, StatusFailed, StatusUnknown:
		return true
	}
	return false
}

// Final reports whether s is succeeded or failed.
func (s Status) Final() bool { return s == StatusSucceeded || s == StatusFailed }

// Open reports whether s is pending or unknown.
func (s Status) Open() bool { return s == StatusPending || s == StatusUnknown }

// CanTransition is the state machine (R9): pending -> succeeded | failed |
// unknown; unknown -> succeeded | failed. Nothing else, and never from a
// final status. A "transition" to the same status is not a transition.
// The database trigger attempts_guard enforces the same table.
func CanTransition(from, to Status) bool {
	switch from {
	case StatusPending:
		return to == StatusSucceeded || to == StatusFailed || to == StatusUnknown
	case StatusUnknown:
		return to == StatusSucceeded || to == StatusFailed
	}
	return false
}

// sourcesFor returns the statuses from which `to` may be reached.
func sourcesFor(to Status) []Status {
	var out []Status
	for _, from := range Statuses {
		if CanTransition(from, to) {
			out = append(out, from)
		}
	}
	return out
}

// TransitionError is returned when a requested transition is not allowed by
// the state machine.
type TransitionError struct {
	From, To Status
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("attempts: transition %s -> %s not allowed (R9)", e.From, e.To)
}

// Is makes errors.Is(err, ErrTransition) match.
func (e *TransitionError) Is(target error) bool { return target == ErrTransition }

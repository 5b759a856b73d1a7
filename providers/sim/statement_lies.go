package sim

import (
	"fmt"
	"net/http"
	"time"

	"github.com/shopspring/decimal"

	"github.com/saldo/saldo/providers"
)

// StatementLieKind is one way the sim's daily statement can be made to
// disagree with what it did, so reconciliation (R19, issue 16) can be
// tested against each divergence it must find. Lies change statements only:
// lookups, webhooks, the oracle and balances keep telling the truth.
type StatementLieKind string

// The lies.
const (
	// LieHide leaves the operations with the lie's Reference off every
	// statement (missing at the provider).
	LieHide StatementLieKind = "hide"
	// LieDuplicate lists the operation with the lie's Reference twice, the
	// copy under another provider id (ID, default the original's id with
	// "_dup"): a double payment.
	LieDuplicate StatementLieKind = "duplicate"
	// LieAmount lists the operation with the lie's Reference with Amount
	// (and Currency, when set) instead of its own.
	LieAmount StatementLieKind = "amount"
	// LieAdd lists an operation the sim never executed: ID (default
	// "op_added_<n>"), Reference (may be empty or one saldo never sent),
	// Operation, Amount, Currency, State (default succeeded), final at At.
	LieAdd StatementLieKind = "add"
)

// StatementLie is one lie; see the kinds for the fields each reads.
type StatementLie struct {
	Kind      StatementLieKind
	Reference string
	ID        string
	Operation providers.Operation
	Amount    string
	Currency  string
	State     providers.State
	At        time.Time
}

// AddStatementLie makes every later statement lie as l says (tests only).
// It refuses a lie that names too little to apply.
func (s *Server) AddStatementLie(l StatementLie) error {
	switch l.Kind {
	case LieHide, LieDuplicate:
		if l.Reference == "" {
			return fmt.Errorf("sim: a %s lie needs a reference", l.Kind)
		}
	case LieAmount:
		if l.Reference == "" || l.Amount == "" {
			return fmt.Errorf("sim: an amount lie needs a reference and an amount")
		}
	case LieAdd:
		if !l.Operation.Valid() || l.Amount == "" || l.Currency == "" || l.At.IsZero() {
			return fmt.Errorf("sim: an add lie needs an operation, amount, currency and time")
		}
		if _, err := decimal.NewFromString(l.Amount); err != nil {
			return fmt.Errorf("sim: an add lie's amount %q: %w", l.Amount, err)
		}
	default:
		return fmt.Errorf("sim: unknown statement lie %q", l.Kind)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.Kind == LieAdd && l.ID == "" {
		l.ID = fmt.Sprintf("op_added_%d", len(s.lies)+1)
	}
	if l.Kind == LieAdd && l.State == "" {
		l.State = providers.StateSucceeded
	}
	s.lies = append(s.lies, l)
	return nil
}

// lieLocked applies the lies to a day's statement [start, end).
func (s *Server) lieLocked(out []Operation, start, end time.Time) []Operation {
	if len(s.lies) == 0 {
		return out
	}
	kept := out[:0:0]
	for _, o := range out {
		hidden := false
		var dups []Operation
		for _, l := range s.lies {
			if l.Reference == "" || l.Reference != o.Reference {
				continue
			}
			switch l.Kind {
			case LieHide:
				hidden = true
			case LieAmount:
				o.Amount = l.Amount
				if l.Currency != "" {
					o.Currency = l.Currency
				}
			case LieDuplicate:
				d := o
				d.ID = l.ID
				if d.ID == "" {
					d.ID = o.ID + "_dup"
				}
				dups = append(dups, d)
			}
		}
		if hidden {
			continue
		}
		kept = append(kept, o)
		kept = append(kept, dups...)
	}
	for _, l := range s.lies {
		if l.Kind != LieAdd || l.At.Before(start) || !l.At.Before(end) {
			continue
		}
		kept = append(kept, Operation{ID: l.ID, Reference: l.Reference, Operation: l.Operation, Amount: l.Amount,
			Currency: l.Currency, State: l.State, CreatedAt: l.At, FinalAt: l.At})
	}
	return kept
}

// wireLie is POST /sim/statement-lies's body.
type wireLie struct {
	Kind      StatementLieKind    `json:"kind"`
	Reference string              `json:"reference,omitempty"`
	ID        string              `json:"id,omitempty"`
	Operation providers.Operation `json:"operation,omitempty"`
	Amount    string              `json:"amount,omitempty"`
	Currency  string              `json:"currency,omitempty"`
	State     providers.State     `json:"state,omitempty"`
	At        time.Time           `json:"at,omitzero"`
}

// handleStatementLie is POST /sim/statement-lies: AddStatementLie for a sim
// in another process (saldo sim-provider), for demos and tests.
func (s *Server) handleStatementLie(w http.ResponseWriter, r *http.Request) {
	body, rerr := readBody(w, r)
	if rerr != nil {
		writeAPIError(w, rerr)
		return
	}
	var l wireLie
	if err := decodeStrict(body, &l); err != nil {
		writeAPIError(w, invalid("body", "invalid JSON body: %v", err))
		return
	}
	if err := s.AddStatementLie(StatementLie(l)); err != nil {
		writeAPIError(w, invalid("kind", "%v", err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"added": 1})
}

package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/saldo/saldo/internal/replica"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
)

// statementEntryJSON is one entry of a merchant's statement.
type statementEntryJSON struct {
	Account       string             `json:"account"`
	Purpose       string             `json:"purpose"`
	Seq           int64              `json:"seq"`
	TransactionID int64              `json:"transaction_id"`
	Amount        string             `json:"amount"`
	Currency      string             `json:"currency"`
	BalanceAfter  string             `json:"balance_after"`
	PostedAt      time.Time          `json:"posted_at"`
	Cause         statementCauseJSON `json:"cause"`
}

// statementCauseJSON says what made an entry: the ledger transaction's
// cause kind and the object behind it.
type statementCauseJSON struct {
	// Kind is the ledger transaction's cause: payout_reserve,
	// payout_settle, payout_release, payout_reserve_carry, charge_credit,
	// funding, reversal, divergence_hold (money held while a divergence
	// of the attempt is open), divergence_hold_release (given back at its
	// settlement), divergence_hold_book (booked as gone at its
	// settlement), or another kind.
	Kind string `json:"kind"`
	// Object is what the entry belongs to: payout, pix_transfer, refund,
	// split_leg (the payout kinds), charge, charge_split (a share of
	// another merchant's charge), funding, reversal, or other. A hold's
	// entries belong to the payout or charge whose attempt diverged
	// (attempt_id names it).
	Object string `json:"object"`
	// ObjectID is the payout's, refund's or charge's id, or the reversed
	// transaction's id.
	ObjectID  string `json:"object_id,omitempty"`
	AttemptID string `json:"attempt_id,omitempty"`
	// ChargeID is the charge a refund gives money back for.
	ChargeID string `json:"charge_id,omitempty"`
}

// statement answers GET /v1/merchants/{merchant_id}/statement: the
// merchant's own entries across its accounts, newest first unless
// order=asc, keyset-paginated.
func (s *Server) statement(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := ledger.StatementRequest{MerchantID: chi.URLParam(r, "merchant_id"), Cursor: q.Get("cursor")}
	var err error
	if req.Limit, err = limitParam(r, ledger.MaxPageSize); err != nil {
		s.problem(w, r, err)
		return
	}
	switch q.Get("order") {
	case "", "desc":
		req.Order = ledger.Descending
	case "asc":
		req.Order = ledger.Ascending
	default:
		s.problem(w, r, invalidField("order", "asc or desc"))
		return
	}
	if c := q.Get("currency"); c != "" {
		if req.Currency, err = money.LookupCurrency(c); err != nil {
			s.problem(w, r, invalidField("currency", "an ISO 4217 code saldo knows, e.g. BRL"))
			return
		}
	}
	if req.From, _, err = timeParam(r, "from"); err != nil {
		s.problem(w, r, err)
		return
	}
	if req.To, _, err = timeParam(r, "to"); err != nil {
		s.problem(w, r, err)
		return
	}
	if !req.From.IsZero() && !req.To.IsZero() && !req.From.Before(req.To) {
		s.problem(w, r, invalidField("to", "must be after from"))
		return
	}
	pg, err := ledger.MerchantStatement(r.Context(), s.db(r), req)
	if _, fromReplica := replica.FromReplica(r.Context()); fromReplica && errors.Is(err, ledger.ErrCursorAhead) {
		// The cursor may come from the primary, ahead of this replica:
		// a 5xx from a replica is dropped unsent and the primary answers
		// (which refuses a forged cursor with a 400).
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	if err != nil {
		s.problem(w, r, err)
		return
	}
	out := make([]statementEntryJSON, len(pg.Entries))
	for i, e := range pg.Entries {
		m := e.Currency.MinorUnits()
		out[i] = statementEntryJSON{Account: e.AccountCode, Purpose: string(e.Purpose), Seq: e.Seq,
			TransactionID: e.TransactionID, Amount: e.Amount.StringFixed(m), Currency: e.Currency.Code(),
			BalanceAfter: e.BalanceAfter.StringFixed(m), PostedAt: e.PostedAt.UTC()}
	}
	if err := s.statementCauses(r.Context(), req.MerchantID, pg.Entries, out); err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, pageOf(out, pg.NextCursor))
}

// Ledger cause kinds the statement names objects for (payouts, charges,
// merchants and ledger own them; api reads them only).
const (
	causePayoutReserve      = "payout_reserve"
	causePayoutSettle       = "payout_settle"
	causePayoutRelease      = "payout_release"
	causePayoutReserveCarry = "payout_reserve_carry"
	causeChargeCredit       = "charge_credit"
	causeFunding            = "funding"
	causeHold               = "divergence_hold"
	causeHoldRelease        = "divergence_hold_release"
	causeHoldBook           = "divergence_hold_book"
)

// statementCauses fills each entry's cause: the payout (of any kind) behind
// a payout_* transaction through its attempt, the charge behind a credit.
// One round trip reads both.
func (s *Server) statementCauses(ctx context.Context, merchantID string, es []ledger.StatementEntry, out []statementEntryJSON) error {
	var attemptIDs []uuid.UUID
	var chargeIDs []string
	for i, e := range es {
		c := &out[i].Cause
		c.Kind = e.CauseKind
		switch e.CauseKind {
		case causePayoutReserve, causePayoutSettle, causePayoutRelease, causePayoutReserveCarry:
			c.Object = "payout"
			if id, err := uuid.Parse(e.CauseID); err == nil {
				c.AttemptID = id.String()
				attemptIDs = append(attemptIDs, id)
			}
		case causeChargeCredit:
			c.Object = "charge"
			chargeIDs = append(chargeIDs, e.CauseID)
		case causeHold, causeHoldRelease, causeHoldBook:
			// The payout's or the charge's attempt that diverged.
			c.Object = "divergence"
			if id, err := uuid.Parse(e.CauseID); err == nil {
				c.AttemptID = id.String()
				attemptIDs = append(attemptIDs, id)
			}
		case causeFunding:
			c.Object = "funding"
		case ledger.CauseReversal:
			c.Object, c.ObjectID = "reversal", e.CauseID
		default:
			c.Object = "other"
		}
	}
	if len(attemptIDs) == 0 && len(chargeIDs) == 0 {
		return nil
	}
	// payoutOf is what an attempt is for: a payout (kind, id, the charge
	// a refund returns) or, direction in, a charge (id, its merchant).
	type payoutOf struct{ direction, kind, id, chargeID, chargeOwner string }
	payouts := make(map[string]payoutOf)
	chargeOwner := make(map[string]string)
	b := &pgx.Batch{}
	b.Queue(`SELECT a.id::text, a.direction, coalesce(p.kind, ''), a.subject_id, coalesce(p.charge_id, ''), coalesce(c.merchant_id, '')
		FROM attempts a LEFT JOIN payouts p ON p.id = a.subject_id AND a.direction = 'out'
		LEFT JOIN charges c ON c.id = a.subject_id AND a.direction = 'in'
		WHERE a.id = ANY ($1::uuid[]) AND (p.id IS NOT NULL OR c.id IS NOT NULL)`, attemptIDs)
	b.Queue(`SELECT id, merchant_id FROM charges WHERE id = ANY ($1::text[])`, chargeIDs)
	res := replica.DB(ctx, s.pool).SendBatch(ctx, b)
	defer res.Close()
	rows, err := res.Query()
	if err != nil {
		return fmt.Errorf("api: statement causes: %w", err)
	}
	for rows.Next() {
		var a string
		var p payoutOf
		if err := rows.Scan(&a, &p.direction, &p.kind, &p.id, &p.chargeID, &p.chargeOwner); err != nil {
			rows.Close()
			return fmt.Errorf("api: statement causes: %w", err)
		}
		payouts[a] = p
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("api: statement causes: %w", err)
	}
	rows, err = res.Query()
	if err != nil {
		return fmt.Errorf("api: statement causes: %w", err)
	}
	for rows.Next() {
		var id, owner string
		if err := rows.Scan(&id, &owner); err != nil {
			rows.Close()
			return fmt.Errorf("api: statement causes: %w", err)
		}
		chargeOwner[id] = owner
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("api: statement causes: %w", err)
	}
	if err := res.Close(); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("api: statement causes: %w", err)
	}
	for i, e := range es {
		c := &out[i].Cause
		switch c.Object {
		case "payout":
			if p, ok := payouts[c.AttemptID]; ok && p.direction == "out" {
				c.Object, c.ObjectID, c.ChargeID = p.kind, p.id, p.chargeID
			}
		case "divergence":
			p, ok := payouts[c.AttemptID]
			switch {
			case !ok:
				c.Object = "other"
			case p.direction == "out":
				c.Object, c.ObjectID, c.ChargeID = p.kind, p.id, p.chargeID
			case p.chargeOwner == merchantID:
				c.Object, c.ObjectID = "charge", p.id
			default:
				// A split recipient's share held: another merchant's charge.
				c.Object = "charge_split"
			}
		case "charge":
			// A split recipient is credited a share of another merchant's
			// charge: it sees that it was a split, not the other's charge.
			if owner, ok := chargeOwner[e.CauseID]; ok && owner == merchantID {
				c.ObjectID = e.CauseID
			} else {
				c.Object = "charge_split"
			}
		}
	}
	return nil
}

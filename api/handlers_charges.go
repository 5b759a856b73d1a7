package api

import (
	"fmt"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
)

// ChargeJSON is a charge on the wire.
type ChargeJSON struct {
	ID            string            `json:"id"`
	MerchantID    string            `json:"merchant_id"`
	Kind          string            `json:"kind"`
	Provider      string            `json:"provider"`
	Amount        string            `json:"amount"`
	Currency      string            `json:"currency"`
	Fee           string            `json:"fee"`
	MerchantNet   string            `json:"merchant_net"`
	Splits        []chargeSplitJSON `json:"splits,omitempty"`
	Description   string            `json:"description,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	Status        string            `json:"status"`
	FailureCode   string            `json:"failure_code,omitempty"`
	FailureReason string            `json:"failure_reason,omitempty"`
	AttemptID     string            `json:"attempt_id,omitempty"`
	Reference     string            `json:"reference,omitempty"`
	ProviderID    string            `json:"provider_id,omitempty"`
	Pix           *pixPaymentJSON   `json:"pix,omitempty"`
	PaidAt        *time.Time        `json:"paid_at,omitempty"`
	PaidBy        string            `json:"paid_by,omitempty"`
	CreatedAt     time.Time         `json:"created_at"`
	UpdatedAt     time.Time         `json:"updated_at"`
	// NeedsAttention: an attempt of the charge has a divergence (paid after
	// it failed, failed after it was paid, disputed) no operator has
	// settled yet.
	NeedsAttention bool `json:"needs_attention"`
}

type chargeSplitJSON struct {
	RecipientID string `json:"recipient_id"`
	Percent     string `json:"percent,omitempty"`
	Fixed       string `json:"fixed,omitempty"`
	Amount      string `json:"amount"`
}

type pixPaymentJSON struct {
	TxID      string    `json:"txid"`
	CopyPaste string    `json:"copy_paste"`
	Location  string    `json:"location,omitempty"`
	ExpiresAt time.Time `json:"expires_at"`
}

func chargeJSONOf(c charges.Charge) ChargeJSON {
	out := ChargeJSON{ID: c.ID, MerchantID: c.MerchantID, Kind: string(c.Kind), Provider: c.Provider,
		Amount: c.Amount.Format(), Currency: c.Amount.Currency().Code(), Description: c.Description, Metadata: c.Metadata,
		Status: string(c.Status), FailureCode: c.FailureCode, FailureReason: c.FailureReason, Reference: c.Reference,
		ProviderID: c.ProviderID, PaidAt: utcPtr(c.PaidAt), PaidBy: c.PaidBy, CreatedAt: c.CreatedAt.UTC(), UpdatedAt: c.UpdatedAt.UTC(),
		NeedsAttention: c.NeedsAttention}
	if c.Fee.IsValid() {
		out.Fee = c.Fee.Format()
	} else {
		out.Fee = money.Zero(c.Amount.Currency()).Format()
	}
	if c.MerchantNet.IsValid() {
		out.MerchantNet = c.MerchantNet.Format()
	} else {
		out.MerchantNet = out.Amount
	}
	if c.AttemptID != nil {
		out.AttemptID = c.AttemptID.String()
	}
	if c.Pix != nil {
		out.Pix = &pixPaymentJSON{TxID: c.Pix.TxID, CopyPaste: c.Pix.CopyPaste, Location: c.Pix.Location, ExpiresAt: c.Pix.ExpiresAt.UTC()}
	}
	for _, sp := range c.Splits {
		sj := chargeSplitJSON{RecipientID: sp.RecipientID, Amount: sp.Amount.Format()}
		if sp.Percent != nil {
			sj.Percent = sp.Percent.String()
		}
		if sp.Fixed != nil {
			sj.Fixed = sp.Fixed.Format()
		}
		out.Splits = append(out.Splits, sj)
	}
	return out
}

type chargeSplitRequest struct {
	RecipientID string `json:"recipient_id"`
	Percent     string `json:"percent"`
	Amount      string `json:"amount"`
}

type createChargeRequest struct {
	Kind                string               `json:"kind"`
	Amount              string               `json:"amount"`
	Currency            string               `json:"currency"`
	CardToken           string               `json:"card_token"`
	PixExpiresInSeconds int64                `json:"pix_expires_in_seconds"`
	PayerName           string               `json:"payer_name"`
	PayerTaxID          string               `json:"payer_tax_id"`
	Description         string               `json:"description"`
	Metadata            map[string]string    `json:"metadata"`
	Splits              []chargeSplitRequest `json:"splits"`
}

// maxPixExpiresInSeconds bounds pix_expires_in_seconds: charges.MaxPixExpiry.
const maxPixExpiresInSeconds = int64(charges.MaxPixExpiry / time.Second)

func (s *Server) createCharge(w http.ResponseWriter, r *http.Request) {
	var req createChargeRequest
	if err := s.decode(w, r, &req); err != nil {
		s.problem(w, r, err)
		return
	}
	amt, err := parsePositive(req.Amount, req.Currency, "amount")
	if err != nil {
		s.problem(w, r, err)
		return
	}
	// Bounded before it is multiplied: 2^55+3600 seconds wrapped
	// time.Duration to one hour. 0 (left out) is the provider's default.
	if req.PixExpiresInSeconds < 0 || req.PixExpiresInSeconds > maxPixExpiresInSeconds {
		s.problem(w, r, invalidField("pix_expires_in_seconds", fmt.Sprintf("whole seconds between 60 and %d (0 or left out: the default)", maxPixExpiresInSeconds)))
		return
	}
	cr := charges.ChargeRequest{MerchantID: chi.URLParam(r, "merchant_id"), ClientKey: r.Header.Get(IdempotencyHeader),
		Kind: charges.Kind(req.Kind), Amount: amt, CardToken: req.CardToken,
		PixExpiresIn: time.Duration(req.PixExpiresInSeconds) * time.Second, PayerName: req.PayerName,
		PayerTaxID: req.PayerTaxID, Description: req.Description, Metadata: req.Metadata}
	for i, sp := range req.Splits {
		rule := charges.SplitRule{RecipientID: sp.RecipientID}
		if sp.Percent != "" {
			if rule.Percent, err = money.ParseDecimal(sp.Percent); err != nil {
				s.problem(w, r, invalidField(fmt.Sprintf("splits[%d].percent", i), "a decimal string such as \"12.5\""))
				return
			}
		}
		if sp.Amount != "" {
			a, err := money.Parse(sp.Amount, req.Currency)
			if err != nil {
				s.problem(w, r, invalidField(fmt.Sprintf("splits[%d].amount", i), err.Error()))
				return
			}
			rule.Amount = a.Decimal()
		}
		cr.Splits = append(cr.Splits, rule)
	}
	c, err := s.cfg.Charges.Create(r.Context(), cr)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/merchants/"+c.MerchantID+"/charges/"+c.ID)
	writeJSON(w, http.StatusCreated, chargeJSONOf(c))
}

func (s *Server) getCharge(w http.ResponseWriter, r *http.Request) {
	c, err := s.cfg.Charges.Get(r.Context(), chi.URLParam(r, "merchant_id"), chi.URLParam(r, "charge_id"))
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, chargeJSONOf(c))
}

func (s *Server) listCharges(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := limitParam(r, 100)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	st := charges.Status(q.Get("status"))
	switch st {
	case "", charges.StatusProcessing, charges.StatusAwaitingPayment, charges.StatusPaid, charges.StatusFailed, charges.StatusExpired:
	default:
		s.problem(w, r, invalidField("status", "processing, awaiting_payment, paid, failed or expired"))
		return
	}
	kind := charges.Kind(q.Get("kind"))
	if kind != "" && kind != charges.KindCard && kind != charges.KindPix {
		s.problem(w, r, invalidField("kind", "card or pix"))
		return
	}
	cs, next, err := s.cfg.Charges.List(r.Context(), charges.ListParams{MerchantID: chi.URLParam(r, "merchant_id"),
		Status: st, Kind: kind, Cursor: q.Get("cursor"), Limit: limit})
	if err != nil {
		s.problem(w, r, err)
		return
	}
	out := make([]ChargeJSON, 0, len(cs))
	for _, c := range cs {
		out = append(out, chargeJSONOf(c))
	}
	writeJSON(w, http.StatusOK, pageOf(out, next))
}

type createRefundRequest struct {
	// Amount left out refunds everything still refundable; given, it must
	// be an amount (an empty one is refused, never read as "everything").
	Amount      *string           `json:"amount"`
	Currency    string            `json:"currency"`
	Description string            `json:"description"`
	Metadata    map[string]string `json:"metadata"`
}

// createRefund returns money of a paid charge: a payout of kind refund,
// reserved from the merchant's available balance like any payout (R21).
func (s *Server) createRefund(w http.ResponseWriter, r *http.Request) {
	var req createRefundRequest
	if _, err := s.decodeOptional(w, r, &req); err != nil {
		s.problem(w, r, err)
		return
	}
	rr := payouts.RefundRequest{MerchantID: chi.URLParam(r, "merchant_id"), ClientKey: r.Header.Get(IdempotencyHeader),
		ChargeID: chi.URLParam(r, "charge_id"), Description: req.Description, Metadata: req.Metadata}
	if req.Amount != nil {
		if *req.Amount == "" {
			s.problem(w, r, invalidField("amount", "amount is empty: leave it out to refund everything still refundable"))
			return
		}
		amt, err := parsePositive(*req.Amount, req.Currency, "amount")
		if err != nil {
			s.problem(w, r, err)
			return
		}
		rr.Amount = amt
	} else if req.Currency != "" {
		// A full refund is in the charge's currency: a currency named
		// with it must be that one, not silently ignored. The charge's
		// currency never changes, so reading it before CreateRefund's
		// transaction races with nothing.
		cur, err := money.LookupCurrency(req.Currency)
		if err != nil {
			s.problem(w, r, invalidField("currency", fmt.Sprintf("unknown currency %q", req.Currency)))
			return
		}
		c, err := s.cfg.Charges.Get(r.Context(), rr.MerchantID, rr.ChargeID)
		if err != nil {
			s.problem(w, r, err)
			return
		}
		if cc := c.Amount.Currency(); cc != cur {
			s.problem(w, r, invalidField("currency", fmt.Sprintf("the charge is in %s: leave currency out or name %s", cc.Code(), cc.Code())))
			return
		}
	}
	p, err := s.payouts.CreateRefund(r.Context(), rr)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/merchants/"+p.MerchantID+"/payouts/"+p.ID)
	writeJSON(w, http.StatusCreated, payoutJSON(p))
}

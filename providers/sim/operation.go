package sim

import (
	"time"

	"github.com/shopspring/decimal"

	"github.com/saldo/saldo/providers"
)

// Operation is one operation the sim executed, as its oracle, lookups,
// statements and webhooks show it. Declines are operations too (state
// failed); requests refused before execution (malformed, rate limited,
// faults that process nothing) are not.
type Operation struct {
	ID        string              `json:"id"`
	Reference string              `json:"reference"`
	Operation providers.Operation `json:"operation"`
	Amount    string              `json:"amount"`
	Currency  string              `json:"currency"`
	// State: succeeded, processing or failed. For pix_charge: processing
	// while the cob is active, succeeded once paid, failed once expired.
	State         providers.State `json:"state"`
	FailureCode   string          `json:"failure_code,omitempty"`
	FailureReason string          `json:"failure_reason,omitempty"`
	// IdempotencyKey the operation was created with ("" without one). Shown
	// by the oracle only.
	IdempotencyKey string    `json:"idempotency_key,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
	// FinalAt is when the operation reached succeeded or failed.
	FinalAt     time.Time              `json:"final_at,omitzero"`
	Destination *providers.Destination `json:"destination,omitempty"`
	CardToken   string                 `json:"card_token,omitempty"`
	// ChargeID and ChargeReference: the charge a refund returned.
	ChargeID        string `json:"charge_id,omitempty"`
	ChargeReference string `json:"charge_reference,omitempty"`
	// AmountRefunded of a charge.
	AmountRefunded string            `json:"amount_refunded,omitempty"`
	Cob            *Cob              `json:"cob,omitempty"`
	Description    string            `json:"description,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`

	amount   decimal.Decimal
	refunded decimal.Decimal
	settleAt time.Time
}

// Cob statuses (BCB API Pix names; EXPIRADA is the sim's name for a cob
// past its expiry, which the BCB API keeps as ATIVA but nobody can pay).
const (
	CobActive  = "ATIVA"
	CobPaid    = "CONCLUIDA"
	CobExpired = "EXPIRADA"
)

// Cob is a Pix charge (cobrança imediata).
type Cob struct {
	TxID       string    `json:"txid"`
	Status     string    `json:"status"`
	ExpiresAt  time.Time `json:"expires_at"`
	Location   string    `json:"location"`
	CopyPaste  string    `json:"pix_copia_e_cola"`
	PaidAt     time.Time `json:"paid_at,omitzero"`
	PayerName  string    `json:"payer_name,omitempty"`
	PayerTaxID string    `json:"payer_tax_id,omitempty"`
}

// moneyMoving reports whether the operation moved (or committed to move)
// money: outgoing operations that succeeded or are processing, incoming
// ones that succeeded.
func (o *Operation) moneyMoving() bool {
	switch o.Operation {
	case providers.OpPixTransfer, providers.OpBankPayout, providers.OpRefund:
		return o.State == providers.StateSucceeded || o.State == providers.StateProcessing
	}
	return o.State == providers.StateSucceeded
}

func (o *Operation) outgoing() bool {
	switch o.Operation {
	case providers.OpPixTransfer, providers.OpBankPayout, providers.OpRefund:
		return true
	}
	return false
}

// snapshot copies o for callers; withKey keeps the idempotency key.
func (o *Operation) snapshot(withKey bool) Operation {
	c := *o
	if o.Cob != nil {
		cob := *o.Cob
		c.Cob = &cob
	}
	if o.Destination != nil { // callers may mutate their copy
		d := *o.Destination
		if d.PixKey != nil {
			k := *d.PixKey
			d.PixKey = &k
		}
		if d.BankAccount != nil {
			a := *d.BankAccount
			d.BankAccount = &a
		}
		c.Destination = &d
	}
	if o.Metadata != nil {
		c.Metadata = make(map[string]string, len(o.Metadata))
		for k, v := range o.Metadata {
			c.Metadata[k] = v
		}
	}
	if !o.refunded.IsZero() || o.Operation == providers.OpCardCharge || o.Operation == providers.OpPixCharge {
		c.AmountRefunded = formatAmount(o.refunded, o.Currency)
	}
	if !withKey {
		c.IdempotencyKey = ""
	}
	return c
}

package stripe

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	stripego "github.com/stripe/stripe-go/v85"

	"github.com/saldo/saldo/providers"
)

// view is one Stripe object as saldo reads it, whatever its type.
type view struct {
	Operation     providers.Operation
	ID            string
	Reference     string // metadata[saldo_reference], "" when not saldo's
	State         providers.State
	Amount        string // major units
	Currency      string // upper case
	FailureCode   string
	FailureReason string
	Created       time.Time
	Data          []byte
	// ExpectedBy is when Stripe expects a processing operation to end
	// (a payout's arrival date); zero when it states none.
	ExpectedBy time.Time
}

// paths of the create endpoints, by operation.
var createPath = map[providers.Operation]string{
	providers.OpCardCharge:      "/v1/payment_intents",
	providers.OpRefund:          "/v1/refunds",
	providers.OpAccountTransfer: "/v1/transfers",
	providers.OpBankPayout:      "/v1/payouts",
}

// parseObject reads a Stripe object of the kind op creates. ok is false
// when the body is not such an object (no id): the caller cannot name a
// state.
func parseObject(op providers.Operation, body []byte) (view, bool) {
	switch op {
	case providers.OpCardCharge:
		var pi stripego.PaymentIntent
		if json.Unmarshal(body, &pi) != nil || pi.ID == "" || !strings.HasPrefix(pi.ID, "pi_") {
			return view{}, false
		}
		return viewPaymentIntent(&pi), true
	case providers.OpRefund:
		var r stripego.Refund
		if json.Unmarshal(body, &r) != nil || r.ID == "" || r.Object != "refund" {
			return view{}, false
		}
		return viewRefund(&r), true
	case providers.OpAccountTransfer:
		var t stripego.Transfer
		if json.Unmarshal(body, &t) != nil || t.ID == "" || t.Object != "transfer" {
			return view{}, false
		}
		return viewTransfer(&t), true
	case providers.OpBankPayout:
		var po stripego.Payout
		if json.Unmarshal(body, &po) != nil || po.ID == "" || po.Object != "payout" {
			return view{}, false
		}
		return viewPayout(&po), true
	}
	return view{}, false
}

func base(op providers.Operation, id string, md map[string]string, amount int64, cur stripego.Currency, created int64) view {
	return view{Operation: op, ID: id, Reference: md[MetadataReference], Amount: toMajor(amount, string(cur)),
		Currency: strings.ToUpper(string(cur)), Created: time.Unix(created, 0).UTC()}
}

// viewPaymentIntent: succeeded is money captured; processing is accepted,
// not final; requires_payment_method (a failed confirmation) and canceled
// are failed; anything else (requires_action, requires_capture, ...) is
// still open, so processing.
func viewPaymentIntent(pi *stripego.PaymentIntent) view {
	v := base(providers.OpCardCharge, pi.ID, pi.Metadata, pi.Amount, pi.Currency, pi.Created)
	switch pi.Status {
	case stripego.PaymentIntentStatusSucceeded:
		v.State = providers.StateSucceeded
	case stripego.PaymentIntentStatusRequiresPaymentMethod, stripego.PaymentIntentStatusCanceled:
		v.State = providers.StateFailed
		v.FailureCode = string(pi.Status)
		if pi.Status == stripego.PaymentIntentStatusCanceled && pi.CancellationReason != "" {
			v.FailureReason = "canceled: " + string(pi.CancellationReason)
		}
		if e := pi.LastPaymentError; e != nil {
			v.FailureCode, v.FailureReason = errorCode(e), e.Msg
		}
	default:
		v.State = providers.StateProcessing
	}
	if pi.LatestCharge != nil && pi.LatestCharge.ID != "" {
		v.Data, _ = json.Marshal(map[string]string{"latest_charge": pi.LatestCharge.ID})
	}
	return v
}

// viewRefund: pending and requires_action are processing; failed and
// canceled are failed.
func viewRefund(r *stripego.Refund) view {
	v := base(providers.OpRefund, r.ID, r.Metadata, r.Amount, r.Currency, r.Created)
	switch r.Status {
	case stripego.RefundStatusSucceeded:
		v.State = providers.StateSucceeded
	case stripego.RefundStatusFailed, stripego.RefundStatusCanceled:
		v.State = providers.StateFailed
		v.FailureCode = string(r.Status)
		if r.FailureReason != "" {
			v.FailureCode = string(r.FailureReason)
		}
	default:
		v.State = providers.StateProcessing
	}
	if r.PaymentIntent != nil && r.PaymentIntent.ID != "" {
		v.Data, _ = json.Marshal(map[string]string{"payment_intent": r.PaymentIntent.ID})
	}
	return v
}

// viewTransfer: a created transfer has moved the money to the connected
// account's balance (transfers are synchronous). A fully reversed one is
// reported failed, so a reversal after success reaches a human as a
// divergence (R9).
func viewTransfer(t *stripego.Transfer) view {
	v := base(providers.OpAccountTransfer, t.ID, t.Metadata, t.Amount, t.Currency, t.Created)
	v.State = providers.StateSucceeded
	data := map[string]string{}
	switch {
	case t.Reversed:
		v.State, v.FailureCode = providers.StateFailed, "transfer_reversed"
	case t.AmountReversed > 0:
		// Partly reversed (reversed turns true only once the whole amount
		// is): the destination keeps what was not reversed. Reported as
		// that amount, it contradicts the attempt's (R17: review, a note;
		// reconciliation's amount_mismatch) instead of reading as the
		// whole amount paid.
		v.Amount = toMajor(t.Amount-t.AmountReversed, string(t.Currency))
		data["amount_reversed"] = toMajor(t.AmountReversed, string(t.Currency))
	}
	if t.Destination != nil && t.Destination.ID != "" {
		data["destination"], data["transfer_group"] = t.Destination.ID, t.TransferGroup
	}
	if len(data) > 0 {
		v.Data, _ = json.Marshal(data)
	}
	return v
}

// viewPayout: pending and in_transit are processing; paid succeeded;
// failed and canceled failed (with failure_code). A processing payout's
// ExpectedBy is the end of its arrival_date (a UTC date, as Stripe gives
// it: the payout becomes paid some time during that day, weekends and bank
// holidays already counted by Stripe), so that a payout in transit for two
// business days, or over a weekend, reaches review only once it is late
// (R18).
func viewPayout(po *stripego.Payout) view {
	v := base(providers.OpBankPayout, po.ID, po.Metadata, po.Amount, po.Currency, po.Created)
	switch po.Status {
	case stripego.PayoutStatusPaid:
		v.State = providers.StateSucceeded
	case stripego.PayoutStatusFailed, stripego.PayoutStatusCanceled:
		v.State = providers.StateFailed
		v.FailureCode, v.FailureReason = string(po.Status), po.FailureMessage
		if po.FailureCode != "" {
			v.FailureCode = string(po.FailureCode)
		}
	default:
		v.State = providers.StateProcessing
	}
	if po.ArrivalDate != 0 {
		arrival := time.Unix(po.ArrivalDate, 0).UTC()
		v.Data, _ = json.Marshal(map[string]string{"arrival_date": arrival.Format(time.DateOnly)})
		if v.State == providers.StateProcessing {
			day := time.Date(arrival.Year(), arrival.Month(), arrival.Day(), 0, 0, 0, 0, time.UTC)
			v.ExpectedBy = day.AddDate(0, 0, 1)
		}
	}
	return v
}

// errorCode is the most precise code of a Stripe error: the decline code of
// a card decline, else the error code, else its type.
func errorCode(e *stripego.Error) string {
	switch {
	case e.DeclineCode != "":
		return string(e.DeclineCode)
	case e.Code != "":
		return string(e.Code)
	}
	return string(e.Type)
}

// errorBody is Stripe's error answer.
type errorBody struct {
	Error *stripego.Error `json:"error"`
}

func (v view) String() string { return fmt.Sprintf("%s %s %s", v.Operation, v.ID, v.State) }

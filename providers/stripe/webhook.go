package stripe

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"

	stripego "github.com/stripe/stripe-go/v85"
	"github.com/stripe/stripe-go/v85/webhook"

	"github.com/saldo/saldo/providers"
)

// SignatureHeader carries Stripe's webhook signature.
const SignatureHeader = "Stripe-Signature"

// WebhookTolerance is how far a signed timestamp may be from now: stripe-go's
// webhook.DefaultTolerance (300 s).
const WebhookTolerance = webhook.DefaultTolerance

// ParseWebhook verifies Stripe-Signature with stripe-go's webhook package
// (HMAC-SHA256 of "t.body" with the endpoint secret; several v1 signatures
// during a secret rotation), then the signed timestamp against now within
// WebhookTolerance in both directions, then maps the event:
//
//   - payment_intent.succeeded / .payment_failed / .processing / .canceled:
//     card_charge;
//   - refund.created / refund.updated / refund.failed (and the older
//     charge.refund.updated, whose object is the refund too): refund;
//   - transfer.created / .updated / .reversed: account_transfer;
//   - payout.created / .updated / .paid / .failed / .canceled: bank_payout;
//   - charge.dispute.created / .updated / .funds_withdrawn /
//     .funds_reinstated / .closed: a card dispute (parseDispute) of the
//     PaymentIntent the dispute names, as WebhookEvent.Dispute;
//
// each with the object's amount and currency (the attempts core moves money
// only when they match the attempt, issue 13) and our reference from its
// metadata. charge.refunded names the charge, not the refund, and the
// charge's metadata holds the card charge's reference, not the refund's:
// applied to the charge it would flag a good attempt for review. So it and
// any other type, and any object that is not saldo's (no saldo_reference),
// come back with the Stripe object id as Reference, which no attempt
// reference can equal (R13: 32 lowercase hex characters): the API
// acknowledges them as "unmatched" and Stripe stops re-sending them.
//
// The tolerance is checked here rather than by stripe-go because stripe-go
// compares with the wall clock (time.Since), only in the past direction,
// and before the signature: saldo's contract passes now, refuses a
// timestamp too far in the future too, and says "forged" before "stale".
// It is checked on the one t= stripe-go verified (signedTime refuses a
// header with two, or with whitespace).
// The event's API version is not required to match stripe-go's
// (IgnoreAPIVersionMismatch): the adapter reads only id, type, amount,
// currency, status, metadata and failure fields, and a dispute's charge,
// payment_intent, reason and balance_transactions, which every version
// has.
func (p *Provider) ParseWebhook(header http.Header, body []byte, now time.Time) (providers.WebhookEvent, error) {
	if p.secret == "" {
		return providers.WebhookEvent{}, fmt.Errorf("%w: no Stripe webhook secret configured", providers.ErrBadSignature)
	}
	sig := header.Get(SignatureHeader)
	ev, err := webhook.ConstructEventWithOptions(body, sig, p.secret, webhook.ConstructEventOptions{
		IgnoreTolerance: true, IgnoreAPIVersionMismatch: true})
	switch {
	case errors.Is(err, webhook.ErrNotSigned), errors.Is(err, webhook.ErrInvalidHeader), errors.Is(err, webhook.ErrNoValidSignature):
		return providers.WebhookEvent{}, fmt.Errorf("%w: %v", providers.ErrBadSignature, err)
	case err != nil:
		return providers.WebhookEvent{}, fmt.Errorf("%w: %v", providers.ErrMalformedWebhook, err)
	}
	signedAt, err := signedTime(sig)
	if err != nil {
		return providers.WebhookEvent{}, fmt.Errorf("%w: %s: %v", providers.ErrBadSignature, SignatureHeader, err)
	}
	if d := now.Sub(signedAt); d > p.tolerance || d < -p.tolerance {
		return providers.WebhookEvent{}, fmt.Errorf("%w: signed at %s, now %s", providers.ErrStaleWebhook,
			signedAt.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	if ev.ID == "" || ev.Data == nil || len(ev.Data.Raw) == 0 {
		return providers.WebhookEvent{}, fmt.Errorf("%w: event without id or data.object", providers.ErrMalformedWebhook)
	}
	out := providers.WebhookEvent{ID: ev.ID, Type: string(ev.Type), OccurredAt: time.Unix(ev.Created, 0).UTC()}
	var objType struct {
		ID     string `json:"id"`
		Object string `json:"object"`
	}
	if err := json.Unmarshal(ev.Data.Raw, &objType); err != nil || objType.ID == "" {
		return providers.WebhookEvent{}, fmt.Errorf("%w: data.object without id", providers.ErrMalformedWebhook)
	}
	if strings.HasPrefix(string(ev.Type), "charge.dispute.") && objType.Object == "dispute" {
		return parseDispute(out, ev.Type, ev.Data.Raw)
	}
	op, mapped := eventOperation(ev.Type, objType.Object)
	if !mapped {
		return notOurs(out, objType.ID), nil
	}
	v, ok := parseObject(op, ev.Data.Raw)
	if !ok {
		return providers.WebhookEvent{}, fmt.Errorf("%w: %s: unreadable %s", providers.ErrMalformedWebhook, ev.Type, objType.Object)
	}
	if v.Reference == "" {
		return notOurs(out, v.ID), nil
	}
	out.Operation, out.Reference, out.ProviderID, out.State = v.Operation, v.Reference, v.ID, v.State
	out.FailureCode, out.FailureReason = v.FailureCode, v.FailureReason
	out.Amount, out.Currency, out.Data, out.ExpectedBy = v.Amount, v.Currency, v.Data, v.ExpectedBy
	if ev.Type == "payment_intent.payment_failed" && out.State == providers.StateProcessing {
		// The event says the confirmation failed even if the object was
		// caught in between.
		out.State = providers.StateFailed
	}
	return out, nil
}

// Dispute statuses that say the money was withdrawn: a chargeback at any
// stage (Stripe withdraws the disputed amount and its fee when it opens
// one). warning_needs_response, warning_under_review and warning_closed
// are an inquiry, which takes nothing; prevented never reached the
// balance.
var withdrawnStatus = map[stripego.DisputeStatus]bool{stripego.DisputeStatusNeedsResponse: true,
	stripego.DisputeStatusUnderReview: true, stripego.DisputeStatusWon: true, stripego.DisputeStatusLost: true}

// parseDispute maps a charge.dispute.* event (its object a Dispute, read
// with stripe-go's type: id, amount, currency, charge, payment_intent,
// reason, status, balance_transactions) to a WebhookEvent whose Dispute is
// set: ProviderID is the disputed PaymentIntent (what a card_charge
// attempt holds), Amount and Currency the disputed amount (it may differ
// from the charge's: a part of the order, currency conversion), Reference
// the dispute id (no attempt reference, R13) and State processing, so the
// event moves no attempt's status. The money was withdrawn when the event
// is funds_withdrawn or funds_reinstated, when the dispute lists a balance
// transaction, or when its status is a chargeback's (withdrawnStatus):
// whichever of the events comes first (they may come in any order) says
// so. It came back when the event is funds_reinstated or the dispute is
// won. A dispute without a PaymentIntent (a charge saldo did not make
// through one) has no ProviderID and matches nothing.
func parseDispute(out providers.WebhookEvent, t stripego.EventType, raw []byte) (providers.WebhookEvent, error) {
	var d stripego.Dispute
	if err := json.Unmarshal(raw, &d); err != nil || d.ID == "" || d.Object != "dispute" {
		return providers.WebhookEvent{}, fmt.Errorf("%w: %s: unreadable dispute", providers.ErrMalformedWebhook, t)
	}
	if d.Amount <= 0 || d.Currency == "" {
		return providers.WebhookEvent{}, fmt.Errorf("%w: %s: dispute %s without a positive amount and a currency",
			providers.ErrMalformedWebhook, t, d.ID)
	}
	disp := &providers.Dispute{ID: d.ID, Status: string(d.Status), Reason: string(d.Reason),
		Withdrawn: t == stripego.EventTypeChargeDisputeFundsWithdrawn || t == stripego.EventTypeChargeDisputeFundsReinstated ||
			len(d.BalanceTransactions) > 0 || withdrawnStatus[d.Status],
		Reinstated: t == stripego.EventTypeChargeDisputeFundsReinstated || d.Status == stripego.DisputeStatusWon,
		Lost:       d.Status == stripego.DisputeStatusLost}
	data := map[string]string{"dispute": d.ID, "status": string(d.Status), "reason": string(d.Reason)}
	if d.Charge != nil && d.Charge.ID != "" {
		data["charge"] = d.Charge.ID
	}
	out.Operation, out.Reference, out.State, out.Dispute = providers.OpCardCharge, d.ID, providers.StateProcessing, disp
	if d.PaymentIntent != nil && d.PaymentIntent.ID != "" {
		out.ProviderID, data["payment_intent"] = d.PaymentIntent.ID, d.PaymentIntent.ID
	}
	out.Amount, out.Currency = toMajor(d.Amount, string(d.Currency)), strings.ToUpper(string(d.Currency))
	out.Data, _ = json.Marshal(data)
	return out, nil
}

// notOurs is an event saldo does not apply: its Reference is the Stripe
// object id (never an attempt reference), State processing (which never
// moves anything).
func notOurs(ev providers.WebhookEvent, objectID string) providers.WebhookEvent {
	ev.Reference, ev.ProviderID, ev.State = objectID, objectID, providers.StateProcessing
	return ev
}

// eventOperation maps an event type and its object to the operation whose
// object it carries.
func eventOperation(t stripego.EventType, object string) (providers.Operation, bool) {
	prefix, _, _ := strings.Cut(string(t), ".")
	switch {
	case prefix == "payment_intent" && object == "payment_intent":
		return providers.OpCardCharge, true
	case (prefix == "refund" || strings.HasPrefix(string(t), "charge.refund.")) && object == "refund":
		return providers.OpRefund, true
	case prefix == "transfer" && object == "transfer":
		return providers.OpAccountTransfer, true
	case prefix == "payout" && object == "payout":
		return providers.OpBankPayout, true
	}
	return "", false
}

// signedTime reads t= from a Stripe-Signature header (already verified)
// and is sure it is the timestamp stripe-go verified the HMAC with.
// stripe-go's parser keeps the LAST t= and skips a pair whose key is not
// exactly "t" (" t=" with a space): "t=NOW,t=OLD,v1=SIG" or " t=NOW,
// t=OLD,v1=SIG" would pass the signature on OLD and the tolerance on NOW,
// replaying a captured delivery. Stripe sends exactly one t= and no
// whitespace, so a header with whitespace anywhere or with more or fewer
// than one t= is refused.
func signedTime(h string) (time.Time, error) {
	if strings.ContainsFunc(h, unicode.IsSpace) {
		return time.Time{}, errors.New("whitespace in the header")
	}
	var at time.Time
	seen := 0
	for _, part := range strings.Split(h, ",") {
		k, v, _ := strings.Cut(part, "=")
		if k != "t" {
			continue
		}
		if seen++; seen > 1 {
			return time.Time{}, errors.New("more than one t=")
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("unreadable t=%q", v)
		}
		at = time.Unix(n, 0)
	}
	if seen == 0 {
		return time.Time{}, errors.New("no t=")
	}
	return at, nil
}

package stripe

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	stripego "github.com/stripe/stripe-go/v85"

	"github.com/saldo/saldo/providers"
)

// FormContentType is the body type of Stripe's v1 API.
const FormContentType = "application/x-www-form-urlencoded"

// Headers Stripe answers with that the adapter reads.
const (
	// ShouldRetryHeader: Stripe's hint that a retry with the same key is
	// (true) or is not (false) useful.
	ShouldRetryHeader = "Stripe-Should-Retry"
	// ReplayedHeader: "true" on an answer replayed for an idempotency key;
	// it is read exactly like the first answer.
	ReplayedHeader = "Idempotent-Replayed"
)

// Submit POSTs req.Payload once to the create endpoint of req.Operation,
// with the attempt's key in Idempotency-Key, and reads the answer:
//
//   - 2xx: the object's id and state (PaymentIntent succeeded/processing/
//     failed, Refund, Transfer, Payout pending/in_transit/paid/failed); a
//     body that is not the expected object names no state (unknown);
//   - 402 card_error and other definitive 4xx: failed with the decline
//     code or error code (a card_error is RefineDeclined);
//   - 400 idempotency_error (the key was used with other parameters):
//     RefineKeyMisuse, never failed, never re-sent (R5);
//   - 409 and idempotency_key_in_use: RefineInFlight (resolved by lookup);
//   - 429 (rate_limit, lock_timeout): RefineRateLimited, re-sent after
//     Retry-After;
//   - 401 and 403: Stripe processed nothing (authentication or permission
//     refused before any work, and nothing is stored under the key), so
//     RefineAuthRefused: the attempt stays pending and waits (the attempts
//     core's AuthRefusedWait, its circuit opened, the refusal counted in
//     saldo_provider_auth_refused_total) until the same request, same key,
//     goes out again; the adapter logs an ERROR alert (the key is wrong,
//     revoked or lacks a permission: an operator must act);
//   - any other 4xx with Stripe-Should-Retry: true: Stripe kept nothing for
//     the key and says the same request may succeed, so it is not a
//     definitive failure: RefineRateLimited (same key, after backoff);
//   - 5xx, a cut connection after the write: no refinement; api_error at
//     any status and 424: RefineUnknown; the classifier says unknown and
//     the resolver looks it up (R14). A 500 is
//     stored under the key and replayed, so re-sending would not help;
//     Stripe-Should-Retry does not change that;
//   - Idempotent-Replayed: true is read like the first answer.
func (p *Provider) Submit(ctx context.Context, req providers.SubmitRequest) providers.SubmitResult {
	path, ok := createPath[req.Operation]
	if !ok {
		return providers.SubmitResult{Exchange: providers.Exchange{
			Err: fmt.Errorf("%w: %s at stripe", providers.ErrUnsupported, req.Operation)}}
	}
	h := p.headers()
	h.Set("Content-Type", FormContentType)
	if req.IdempotencyKey != "" {
		h.Set("Idempotency-Key", req.IdempotencyKey)
	}
	ex := p.client.Do(ctx, http.MethodPost, p.baseURL+path, h, req.Payload)
	return p.readSubmit(req.Operation, ex)
}

func (p *Provider) readSubmit(op providers.Operation, ex providers.Exchange) providers.SubmitResult {
	res := providers.SubmitResult{Exchange: ex}
	res.Exchange.Err = p.redactErr(ex.Err)
	res.Exchange.Body = p.redactBody(ex.Body)
	if ex.StatusCode == 0 {
		return res
	}
	if ex.StatusCode >= 200 && ex.StatusCode < 300 {
		if ex.Err != nil {
			return res // a 2xx cut short: unknown
		}
		if v, ok := parseObject(op, ex.Body); ok {
			res.ProviderID, res.State = v.ID, v.State
			res.FailureCode, res.FailureReason = v.FailureCode, v.FailureReason
			res.Data, res.ExpectedBy = v.Data, v.ExpectedBy
		}
		return res
	}
	var eb errorBody
	if json.Unmarshal(ex.Body, &eb) == nil && eb.Error != nil {
		e := eb.Error
		res.FailureCode, res.FailureReason = errorCode(e), p.redact(e.Msg)
		if e.PaymentIntent != nil && e.PaymentIntent.ID != "" {
			res.ProviderID = e.PaymentIntent.ID // a declined confirmation names its PaymentIntent
		}
	}
	res.Refinement = p.refine(ex, eb.Error)
	return res
}

// refine reads an error answer (see Submit).
func (p *Provider) refine(ex providers.Exchange, e *stripego.Error) providers.Refinement {
	status := ex.StatusCode
	var typ stripego.ErrorType
	var code stripego.ErrorCode
	if e != nil {
		typ, code = e.Type, e.Code
	}
	switch {
	case code == stripego.ErrorCodeIdempotencyKeyInUse || status == http.StatusConflict:
		return providers.RefineInFlight
	case typ == stripego.ErrorTypeIdempotency:
		return providers.RefineKeyMisuse
	case status == http.StatusTooManyRequests || code == stripego.ErrorCodeRateLimit || code == stripego.ErrorCodeLockTimeout:
		return providers.RefineRateLimited
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		p.log.Error("stripe: request refused: the API key is wrong, revoked or lacks a permission; attempts stay pending until an operator fixes it",
			"status", status, "type", string(typ), "code", string(code), "request_id", ex.ProviderRequestID)
		return providers.RefineAuthRefused
	case status >= 500:
		return providers.RefineNone
	case typ == stripego.ErrorTypeAPI || status == http.StatusFailedDependency:
		// "Any other type of problem" and "a failure in a dependency
		// external to Stripe" say nothing about the operation, whatever
		// the status: never failed (R1, R2).
		return providers.RefineUnknown
	case typ == stripego.ErrorTypeCard:
		return providers.RefineDeclined
	case status >= 400 && ex.Header.Get(ShouldRetryHeader) == "true":
		return providers.RefineRateLimited
	}
	return providers.RefineNone
}

package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/internal/dbfault"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
)

// ProblemTypeBase prefixes every problem type URI; the rest is the code
// with '_' written as '-': https://saldo.dev/problems/insufficient-balance.
const ProblemTypeBase = "https://saldo.dev/problems/"

// Problem is an RFC 9457 problem detail, with saldo's extensions: Code (a
// stable machine-readable code, also the last segment of Type) and Field
// (the request field at fault, for validation errors).
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
	Code     string `json:"code"`
	Field    string `json:"field,omitempty"`
	// retryAfter, when positive, is sent as Retry-After (seconds).
	retryAfter int
}

// apiError is an error this package raises itself with its HTTP meaning.
type apiError struct {
	status int
	code   string
	title  string
	detail string
	field  string
	// retryAfter, when positive, is sent as Retry-After (seconds).
	retryAfter int
}

func (e *apiError) Error() string { return e.code + ": " + e.detail }

var (
	errNotFound         = &apiError{status: http.StatusNotFound, code: "not_found", title: "Not found", detail: "no such resource"}
	errMethodNotAllowed = &apiError{status: http.StatusMethodNotAllowed, code: "method_not_allowed", title: "Method not allowed", detail: "the resource does not support this method"}
	errUnauthorized     = &apiError{status: http.StatusUnauthorized, code: "unauthorized", title: "Unauthorized", detail: "a valid API key is required: Authorization: Bearer sk_..."}
	errForbidden        = &apiError{status: http.StatusForbidden, code: "forbidden", title: "Forbidden", detail: "this key's role may not do this"}
	// errInvalidQuery: the query string does not parse. Go would drop the
	// parameter it could not read, and a filter would fail open.
	errInvalidQuery = &apiError{status: http.StatusBadRequest, code: "invalid_query", title: "Invalid query string",
		detail: "the query string does not parse (';' is not a separator; escape it as %3B): nothing was run"}
	errUnsupportedMediaType = &apiError{status: http.StatusUnsupportedMediaType, code: "unsupported_media_type",
		title: "Unsupported media type", detail: "send the body as application/json (with that Content-Type)"}
)

func invalidField(field, detail string) *apiError {
	return &apiError{status: http.StatusBadRequest, code: "validation_failed", title: "Validation failed", detail: detail, field: field}
}

func badRequest(detail string) *apiError {
	return &apiError{status: http.StatusBadRequest, code: "invalid_request", title: "Invalid request", detail: detail}
}

// problemFor maps any error to its problem: the ONE place where package
// errors meet HTTP statuses.
func problemFor(err error) Problem {
	var ae *apiError
	var fe *payouts.FieldError
	var ue *payouts.UnroutableError
	var cfe *charges.FieldError
	var pe *money.ParseError
	var mfr *attempts.ManualFailRefusedError
	switch {
	case errors.As(err, &ae):
		return Problem{Status: ae.status, Code: ae.code, Title: ae.title, Detail: ae.detail, Field: ae.field, retryAfter: ae.retryAfter}
	case errors.Is(err, charges.ErrNotRefundable):
		detail := "only a paid charge can be refunded"
		if nr, ok := errors.AsType[*charges.NotRefundableError](err); ok && nr.Reason != "" {
			detail = "charge " + nr.ChargeID + " is not refundable: " + nr.Reason
			if nr.Disputed {
				// Stripe's own code for the refund of a charged-back charge.
				return Problem{Status: http.StatusConflict, Code: "charge_disputed", Title: "Charge disputed", Detail: detail}
			}
		}
		return Problem{Status: http.StatusConflict, Code: "not_refundable", Title: "Not refundable", Detail: detail}
	case errors.Is(err, payouts.ErrRefundExceedsCharge):
		return Problem{Status: http.StatusUnprocessableEntity, Code: "refund_exceeds_charge", Title: "Refund exceeds the charge",
			Detail: "succeeded and open refunds of this charge would exceed what was charged", Field: "amount"}
	case errors.As(err, &ue):
		return Problem{Status: http.StatusUnprocessableEntity, Code: "destination_not_routed", Title: "No provider pays this destination",
			Detail: trimPkg(ue.Error()) + "; nothing was written", Field: ue.Field}
	case errors.As(err, &fe):
		return Problem{Status: http.StatusBadRequest, Code: "validation_failed", Title: "Validation failed", Detail: fe.Reason, Field: fe.Field}
	case errors.As(err, &cfe):
		return Problem{Status: http.StatusBadRequest, Code: "validation_failed", Title: "Validation failed", Detail: cfe.Reason, Field: cfe.Field}
	case errors.As(err, &pe):
		field := "amount"
		if errors.Is(err, money.ErrUnknownCurrency) {
			field = "currency"
		}
		return Problem{Status: http.StatusBadRequest, Code: "validation_failed", Title: "Validation failed", Detail: pe.Error(), Field: field}
	case errors.Is(err, payouts.ErrInsufficientBalance), errors.Is(err, ledger.ErrInsufficientFunds):
		return Problem{Status: http.StatusUnprocessableEntity, Code: "insufficient_balance", Title: "Insufficient balance",
			Detail: "the available balance does not cover this amount; nothing was reserved"}
	case errors.Is(err, payouts.ErrIdempotencyConflict), errors.Is(err, charges.ErrIdempotencyConflict),
		errors.Is(err, ledger.ErrIdempotencyConflict):
		return Problem{Status: http.StatusUnprocessableEntity, Code: "idempotency_key_reused", Title: "Idempotency key reused",
			Detail: "this key was already used for a different request"}
	case errors.Is(err, payouts.ErrNotRetryable):
		return Problem{Status: http.StatusConflict, Code: "not_retryable", Title: "Not retryable",
			Detail: "only a payout whose last attempt failed may be retried"}
	case errors.Is(err, payouts.ErrNotFound), errors.Is(err, payouts.ErrUnknownMerchant),
		errors.Is(err, charges.ErrNotFound), errors.Is(err, charges.ErrUnknownMerchant),
		errors.Is(err, merchants.ErrNotFound), errors.Is(err, attempts.ErrNotFound),
		errors.Is(err, ledger.ErrAccountNotFound), errors.Is(err, ledger.ErrTransactionNotFound):
		return Problem{Status: http.StatusNotFound, Code: "not_found", Title: "Not found", Detail: "no such resource"}
	case errors.Is(err, merchants.ErrExists):
		return Problem{Status: http.StatusConflict, Code: "already_exists", Title: "Already exists", Detail: "a merchant with this id exists"}
	case errors.As(err, &mfr):
		return Problem{Status: http.StatusConflict, Code: "manual_fail_refused", Title: "Manual failure refused",
			Detail: "the provider may still complete this operation, so its reserve cannot be released yet: " + mfr.Reason +
				"; nothing changed"}
	case errors.Is(err, attempts.ErrHoldUndecided):
		return Problem{Status: http.StatusUnprocessableEntity, Code: "hold_decision_required", Title: "Hold decision required",
			Detail: trimPkg(err.Error()) + "; nothing changed", Field: "hold"}
	case errors.Is(err, attempts.ErrNotDiverged):
		return Problem{Status: http.StatusConflict, Code: "not_diverged", Title: "No divergence to settle",
			Detail: "the attempt has no divergence, or it is already settled; nothing changed"}
	case errors.Is(err, attempts.ErrTransition):
		return Problem{Status: http.StatusConflict, Code: "attempt_final", Title: "Attempt already final",
			Detail: "the attempt is already final with another status; nothing changed"}
	case errors.Is(err, ledger.ErrInvalidCursor):
		return Problem{Status: http.StatusBadRequest, Code: "validation_failed", Title: "Validation failed", Detail: "malformed or foreign cursor", Field: "cursor"}
	case errors.Is(err, attempts.ErrInvalidEvidence):
		return Problem{Status: http.StatusBadRequest, Code: "validation_failed", Title: "Validation failed",
			Detail: trimPkg(err.Error()) + "; nothing changed", Field: "evidence"}
	case errors.Is(err, merchants.ErrInvalid), errors.Is(err, attempts.ErrInvalid),
		errors.Is(err, ledger.ErrInvalidInput), errors.Is(err, payouts.ErrInvalid), errors.Is(err, charges.ErrInvalid):
		return Problem{Status: http.StatusBadRequest, Code: "validation_failed", Title: "Validation failed", Detail: trimPkg(err.Error())}
	case errors.Is(err, providers.ErrBadSignature):
		return Problem{Status: http.StatusUnauthorized, Code: "webhook_signature_invalid", Title: "Webhook signature invalid",
			Detail: "the signature did not verify"}
	case errors.Is(err, providers.ErrStaleWebhook):
		return Problem{Status: http.StatusUnauthorized, Code: "webhook_timestamp_stale", Title: "Webhook timestamp stale",
			Detail: "the signed timestamp is outside the tolerance (replay protection)"}
	case errors.Is(err, providers.ErrMalformedWebhook):
		return Problem{Status: http.StatusBadRequest, Code: "webhook_malformed", Title: "Webhook malformed", Detail: trimPkg(err.Error())}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return Problem{Status: http.StatusServiceUnavailable, Code: "unavailable", Title: "Unavailable", Detail: "the request did not complete in time"}
	case databaseUnavailable(err):
		return Problem{Status: http.StatusServiceUnavailable, Code: "database_unavailable", Title: "Database unavailable",
			Detail: "the database did not answer; the request may or may not have taken effect: send it again with the same " +
				"Idempotency-Key to learn which", retryAfter: 1}
	}
	return Problem{Status: http.StatusInternalServerError, Code: "internal", Title: "Internal error",
		Detail: "something went wrong on our side; it was logged"}
}

// trimPkg keeps the useful part of a package error message.
func trimPkg(s string) string {
	for _, p := range []string{"charges: ", "payouts: ", "merchants: ", "attempts: ", "ledger: ", "providers: "} {
		s = strings.ReplaceAll(s, p, "")
	}
	return s
}

// problem writes err as problem+json. 5xx are logged with the error (never
// with request bodies or keys).
func (s *Server) problem(w http.ResponseWriter, r *http.Request, err error) {
	p := problemFor(err)
	p.Type = ProblemTypeBase + strings.ReplaceAll(p.Code, "_", "-")
	p.Instance = r.URL.Path
	if p.Status >= 500 {
		s.log.ErrorContext(r.Context(), "api: request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	}
	if p.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(p.retryAfter))
	}
	if p.Status == http.StatusUnauthorized && !strings.HasPrefix(p.Code, "webhook_") && w.Header().Get("WWW-Authenticate") == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="saldo"`)
	}
	b, _ := json.Marshal(p)
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	_, _ = w.Write(b)
}

// databaseUnavailable reports whether err says the database could not be
// reached or the connection was lost: the client gets 503 with Retry-After,
// never 500. The request may have committed (a lost COMMIT answer), which
// the client learns by sending it again with its key.
func databaseUnavailable(err error) bool { return dbfault.Unavailable(err) }

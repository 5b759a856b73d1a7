package attempts

import (
	"fmt"

	"github.com/saldo/saldo/providers"
)

// Outcome is the class of one provider exchange (R2, R3): what we know about
// whether the provider holds the operation, and so what may happen next.
type Outcome string

// Outcomes of one Submit.
const (
	// OutcomeNotSent: the request never fully left (connect refused, DNS,
	// TLS, write failed). The provider cannot hold it: re-send with the SAME
	// key and bytes.
	OutcomeNotSent Outcome = "not_sent"
	// OutcomeRateLimited: 429 (or an adapter's rate_limited reading). Nothing
	// was processed: re-send after Retry-After or backoff, same key.
	OutcomeRateLimited Outcome = "rate_limited"
	// OutcomeAuthRefused: the provider refused our credentials (an
	// adapter's auth_refused reading of a 4xx: a wrong, revoked or expired
	// key, a missing permission). Nothing was processed, so the same
	// request may go out again, but only once an operator has fixed the
	// configuration: the attempt waits (Config.AuthRefusedWait, not the
	// rate-limit pace), the call does not count towards MaxSends, the
	// breaker opens the provider's circuit for the operation at once, and
	// saldo_provider_auth_refused_total counts it (alert on any increase).
	OutcomeAuthRefused Outcome = "auth_refused"
	// OutcomeInFlight: 409 for this key (another request with it is running)
	// or the provider says the reference already exists: never re-send with a
	// new key; wait, then query (the attempt becomes unknown and is resolved
	// by lookup).
	OutcomeInFlight Outcome = "in_flight"
	// OutcomeSucceeded: 2xx and the provider says the operation is done.
	OutcomeSucceeded Outcome = "succeeded"
	// OutcomeProcessing: 2xx and the provider accepted the operation but has
	// not finished it. The attempt stays open (pending) until a lookup or a
	// webhook says how it ended.
	OutcomeProcessing Outcome = "processing"
	// OutcomeFailed: a definitive refusal (4xx validation, decline,
	// insufficient funds at the provider, or a 2xx that says failed).
	OutcomeFailed Outcome = "failed"
	// OutcomeUnknown: the request left and we do not know what happened
	// (timeout or connection loss after writing, 5xx, unreadable 2xx body).
	// Resolve by query, never by re-sending (R14).
	OutcomeUnknown Outcome = "unknown"
	// OutcomeKeyMisuse: the provider says our key was used with a different
	// payload. A bug on our side: unknown, flagged for review with an alert,
	// never failed automatically.
	OutcomeKeyMisuse Outcome = "key_misuse"
)

// Outcomes lists every outcome.
var Outcomes = []Outcome{OutcomeNotSent, OutcomeRateLimited, OutcomeAuthRefused, OutcomeInFlight, OutcomeSucceeded,
	OutcomeProcessing, OutcomeFailed, OutcomeUnknown, OutcomeKeyMisuse}

// Resendable reports whether the same request may be sent again: only when
// the provider provably holds nothing for it (not sent, rate limited,
// credentials refused).
func (o Outcome) Resendable() bool {
	return o == OutcomeNotSent || o == OutcomeRateLimited || o == OutcomeAuthRefused
}

// Status is the attempt status this outcome leads to from pending. Not sent,
// rate limited, credentials refused and processing keep the attempt
// pending.
func (o Outcome) Status() Status {
	switch o {
	case OutcomeSucceeded:
		return StatusSucceeded
	case OutcomeFailed:
		return StatusFailed
	case OutcomeUnknown, OutcomeInFlight, OutcomeKeyMisuse:
		return StatusUnknown
	}
	return StatusPending
}

// Classify reads one Submit result. It is a pure function of what happened on
// the wire plus the adapter's reading of the body:
//
//   - no response head: not sent if the request was never fully written
//     (Exchange.Wrote false), otherwise unknown (timeout or loss after write);
//   - a response whose body could not be read: rate limited for 429, not
//     sent if the request was never fully written and the answer is not a
//     2xx, otherwise unknown;
//   - a non-2xx answer to a request that was never fully written: not sent
//     (the provider cannot hold a complete request);
//   - an auth_refused reading of a 4xx (401, 403): credentials refused,
//     whether or not the request was fully written or the body read (the
//     provider refused before any work);
//   - key misuse refinement: key_misuse; 429 or rate_limited: rate limited;
//     409, in_flight or duplicate: in flight;
//   - 2xx: by the reported state (succeeded, processing, failed), unknown
//     when the body named no state;
//   - an unknown refinement of a non-2xx (the answer says nothing about
//     the operation): unknown;
//   - 4xx (except 408, 424 and 425, which are unknown): failed;
//   - 5xx and anything else: unknown.
func Classify(r providers.SubmitResult) Outcome {
	ex := r.Exchange
	code := ex.StatusCode
	is2xx := code >= 200 && code < 300
	if r.Refinement == providers.RefineAuthRefused && code >= 400 && code < 500 {
		return OutcomeAuthRefused
	}
	if code == 0 {
		if ex.Wrote {
			return OutcomeUnknown
		}
		return OutcomeNotSent
	}
	if ex.Err != nil {
		switch {
		case code == 429:
			return OutcomeRateLimited
		case !ex.Wrote && !is2xx:
			return OutcomeNotSent
		}
		return OutcomeUnknown
	}
	if !ex.Wrote && !is2xx {
		if code == 429 || r.Refinement == providers.RefineRateLimited {
			return OutcomeRateLimited
		}
		return OutcomeNotSent
	}
	switch {
	case r.Refinement == providers.RefineKeyMisuse:
		return OutcomeKeyMisuse
	case code == 429 || r.Refinement == providers.RefineRateLimited:
		return OutcomeRateLimited
	case code == 409 || r.Refinement == providers.RefineInFlight || r.Refinement == providers.RefineDuplicate:
		return OutcomeInFlight
	case r.Refinement == providers.RefineUnknown && !is2xx:
		return OutcomeUnknown
	}
	if is2xx {
		if r.Refinement == providers.RefineDeclined {
			return OutcomeFailed
		}
		switch r.State {
		case providers.StateSucceeded:
			return OutcomeSucceeded
		case providers.StateProcessing:
			return OutcomeProcessing
		case providers.StateFailed:
			return OutcomeFailed
		}
		return OutcomeUnknown
	}
	if code >= 400 && code < 500 {
		// 408 Request Timeout, 424 Failed Dependency (Stripe: "a failure
		// in a dependency external to Stripe") and 425 Too Early say
		// nothing about what the provider did.
		if code == 408 || code == 424 || code == 425 {
			return OutcomeUnknown
		}
		return OutcomeFailed
	}
	return OutcomeUnknown
}

// acknowledgement says whether a Submit answer shows that the provider
// holds (or is making) the operation, and how: any 2xx (even one whose
// state or body we cannot read), an answer naming the provider's id for
// it, or a 409 / "in flight" / "duplicate" for our key or reference. ""
// when it shows nothing. An acknowledged operation exists at the provider:
// after it, a lookup's "not found" is the provider's search lagging, never
// proof of absence (R16; docs/pitfalls.md, "An acknowledgement outweighs a
// later 'not found'").
func acknowledgement(r providers.SubmitResult) string {
	ex := r.Exchange
	var what string
	switch {
	case ex.StatusCode >= 200 && ex.StatusCode < 300:
		what = fmt.Sprintf("HTTP %d", ex.StatusCode)
		if r.State != "" {
			what += " state " + string(r.State)
		}
	case ex.StatusCode == 409 || r.Refinement == providers.RefineInFlight || r.Refinement == providers.RefineDuplicate:
		what = fmt.Sprintf("HTTP %d key or reference in use", ex.StatusCode)
	case r.ProviderID != "":
		what = fmt.Sprintf("HTTP %d", ex.StatusCode)
	default:
		return ""
	}
	if r.ProviderID != "" {
		what += ", provider id " + r.ProviderID
	}
	return what
}

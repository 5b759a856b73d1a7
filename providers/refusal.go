package providers

import (
	"errors"
	"regexp"
	"strings"
)

// refusalParam is a provider's parameter name at the start of a refusal's
// message ("amount: ...", "legs[2].destination.key: ...").
var refusalParam = regexp.MustCompile(`^[a-z_]+(\[[0-9]+\])?(\.[a-z_]+(\[[0-9]+\])?)*$`)

// Refusal splits a provider's refusal of an input (EncodePayload's
// ErrInvalidInput or ErrUnsupported, wrapped as "<sentinel>: <message>")
// into the parameter its message names ("" when none) and the reason, for
// a client: without the error chain's package prefixes, and, for an
// operation the provider does not support, saying so (the message alone
// is often just the operation's name).
func Refusal(err error) (param, reason string) {
	msg := err.Error()
	unsupported := errors.Is(err, ErrUnsupported)
	for _, sentinel := range []error{ErrInvalidInput, ErrUnsupported} {
		if errors.Is(err, sentinel) {
			msg = strings.TrimPrefix(strings.TrimPrefix(msg, sentinel.Error()), ": ")
		}
	}
	if p, rest, ok := strings.Cut(msg, ": "); ok && refusalParam.MatchString(p) {
		param, msg = p, rest
	}
	if unsupported {
		msg = "not supported by the provider: " + msg
	}
	return param, msg
}

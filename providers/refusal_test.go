package providers_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
)

// A provider's refusal reaches the client as a field and a reason it can
// act on: the parameter the provider named, the message without package
// prefixes, and, for an operation the provider does not support, words
// saying so (the message alone was the operation's bare name, e.g.
// "refund"; found by review).
func TestRefusalNamesTheParameterAndSaysUnsupported(t *testing.T) {
	for _, c := range []struct {
		err           error
		param, reason string
	}{
		{fmt.Errorf("%w: amount: must be positive", providers.ErrInvalidInput), "amount", "must be positive"},
		{fmt.Errorf("%w: legs[2].destination.key: too long", providers.ErrInvalidInput), "legs[2].destination.key", "too long"},
		{fmt.Errorf("%w: a description is required", providers.ErrInvalidInput), "", "a description is required"},
		{fmt.Errorf("%w: refund", providers.ErrUnsupported), "", "not supported by the provider: refund"},
		{fmt.Errorf("%w: account_transfer at stripe", providers.ErrUnsupported), "", "not supported by the provider: account_transfer at stripe"},
	} {
		param, reason := providers.Refusal(c.err)
		require.Equal(t, c.param, param, "%v", c.err)
		require.Equal(t, c.reason, reason, "%v", c.err)
	}
}

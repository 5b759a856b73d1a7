package providers

import "log/slog"

// Secret is a credential in an adapter's configuration (an API key, an
// OAuth2 client secret, a webhook signing secret). It never prints: fmt
// (%v, %+v, %#v, %s), slog and JSON show "[redacted]", so a configuration
// that is logged, printed in a panic or marshalled leaks nothing. The
// adapter turns it into a string (string(s)) only where the secret is
// sent or compared.
type Secret string

// String redacts.
func (Secret) String() string { return "[redacted]" }

// GoString redacts.
func (Secret) GoString() string { return "[redacted]" }

// LogValue redacts.
func (Secret) LogValue() slog.Value { return slog.StringValue("[redacted]") }

// MarshalText redacts.
func (Secret) MarshalText() ([]byte, error) { return []byte("[redacted]"), nil }

// Package intent makes the identifiers of saldo's domain intents (payouts,
// splits, charges) and the hash that tells a repeated request from a
// different one under the same client key.
package intent

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// NewID returns prefix + 32 random lowercase hex characters ("po_...").
func NewID(prefix string) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// RequestHash is the sha256 of the canonical JSON of the parts of a request:
// the same parts in the same order give the same hash.
func RequestHash(parts ...any) []byte {
	b, _ := json.Marshal(parts)
	h := sha256.Sum256(b)
	return h[:]
}

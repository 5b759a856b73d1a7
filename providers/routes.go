package providers

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Routes names the provider that serves each operation saldo originates
// (card charges to one PSP, Pix to another, ...). A refund is never routed:
// it always goes to the provider of the charge it returns, whatever the
// routes say, so a refund route is refused.
type Routes map[Operation]string

// ParseRoutes reads routes written as "operation=provider" pairs separated
// by commas (the form of `saldo serve --route` and SALDO_ROUTES), for
// example "card_charge=stripe,pix_charge=pix,pix_transfer=pix". Spaces
// around names are ignored; an empty string is no routes.
func ParseRoutes(s string) (Routes, error) {
	r := Routes{}
	for pair := range strings.SplitSeq(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		op, prov, ok := strings.Cut(pair, "=")
		op, prov = strings.TrimSpace(op), strings.TrimSpace(prov)
		if !ok || op == "" || prov == "" {
			return nil, fmt.Errorf("providers: route %q: want operation=provider", pair)
		}
		if err := r.Set(Operation(op), prov); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Set routes op to provider. It refuses unknown operations, refunds (they
// follow their charge) and a second route for one operation.
func (r Routes) Set(op Operation, provider string) error {
	switch {
	case !op.Valid():
		return fmt.Errorf("providers: route for unknown operation %q", op)
	case op == OpRefund:
		return fmt.Errorf("providers: refunds are not routed: a refund goes to the provider of its charge")
	case r[op] != "" && r[op] != provider:
		return fmt.Errorf("providers: operation %s routed twice (%s and %s)", op, r[op], provider)
	}
	r[op] = provider
	return nil
}

// Provider returns the provider routed for op.
func (r Routes) Provider(op Operation) (string, bool) {
	p, ok := r[op]
	return p, ok && p != ""
}

// Check verifies every route against the configured providers: each names
// a provider that is configured and supports its operation. saldo serve
// refuses to start otherwise.
func (r Routes) Check(provs map[string]Provider) error {
	for _, op := range slices.Sorted(maps.Keys(r)) {
		name := r[op]
		p, ok := provs[name]
		if !ok {
			return fmt.Errorf("providers: %s is routed to %q, which is not configured", op, name)
		}
		if !p.Capabilities().Supports(op) {
			return fmt.Errorf("providers: %s is routed to %q, which does not support it", op, name)
		}
	}
	return nil
}

// String is the routes in ParseRoutes form, sorted by operation.
func (r Routes) String() string {
	var b strings.Builder
	for i, op := range slices.Sorted(maps.Keys(r)) {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%s", op, r[op])
	}
	return b.String()
}

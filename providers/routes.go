package providers

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Routes names the providers that serve each operation saldo originates
// (card charges to one PSP, Pix to another, ...), in failover order: the
// first takes every new operation; a payout's next attempt after a
// transient failure may go to the next one (payouts.RetryPolicy). A refund
// is never routed: it always goes to the provider of the charge it returns,
// whatever the routes say, so a refund route is refused.
type Routes map[Operation][]string

// ParseRoutes reads routes written as "operation=provider" pairs separated
// by commas (the form of `saldo serve --route` and SALDO_ROUTES), a
// failover order written with "|", for example
// "card_charge=stripe,pix_charge=pix,pix_transfer=pixA|pixB". Spaces
// around names are ignored; an empty string is no routes.
func ParseRoutes(s string) (Routes, error) {
	r := Routes{}
	for pair := range strings.SplitSeq(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		op, list, ok := strings.Cut(pair, "=")
		op = strings.TrimSpace(op)
		var provs []string
		for p := range strings.SplitSeq(list, "|") {
			provs = append(provs, strings.TrimSpace(p))
		}
		if !ok || op == "" || slices.Contains(provs, "") {
			return nil, fmt.Errorf("providers: route %q: want operation=provider[|provider...]", pair)
		}
		if err := r.Set(Operation(op), provs...); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Set routes op to providers, in failover order. It refuses unknown
// operations, refunds (they follow their charge), a provider named twice
// and a second, different route for one operation.
func (r Routes) Set(op Operation, providers ...string) error {
	switch {
	case !op.Valid():
		return fmt.Errorf("providers: route for unknown operation %q", op)
	case op == OpRefund:
		return fmt.Errorf("providers: refunds are not routed: a refund goes to the provider of its charge")
	case len(providers) == 0:
		return fmt.Errorf("providers: route for %s names no provider", op)
	case len(slices.Compact(slices.Sorted(slices.Values(providers)))) != len(providers):
		return fmt.Errorf("providers: route for %s names a provider twice", op)
	case r[op] != nil && !slices.Equal(r[op], providers):
		return fmt.Errorf("providers: operation %s routed twice (%s and %s)", op,
			strings.Join(r[op], "|"), strings.Join(providers, "|"))
	}
	r[op] = slices.Clone(providers)
	return nil
}

// Provider returns the provider that takes new operations op: the first of
// its route.
func (r Routes) Provider(op Operation) (string, bool) {
	if len(r[op]) == 0 {
		return "", false
	}
	return r[op][0], true
}

// Next returns the provider after current in op's failover order (around
// to the first after the last), or current itself when the route names no
// other (or does not name current).
func (r Routes) Next(op Operation, current string) string {
	list := r[op]
	i := slices.Index(list, current)
	if i < 0 || len(list) < 2 {
		return current
	}
	return list[(i+1)%len(list)]
}

// Check verifies every route against the configured providers: each
// provider it names is configured and supports its operation. saldo serve
// refuses to start otherwise.
func (r Routes) Check(provs map[string]Provider) error {
	for _, op := range slices.Sorted(maps.Keys(r)) {
		for _, name := range r[op] {
			p, ok := provs[name]
			if !ok {
				return fmt.Errorf("providers: %s is routed to %q, which is not configured", op, name)
			}
			if !p.Capabilities().Supports(op) {
				return fmt.Errorf("providers: %s is routed to %q, which does not support it", op, name)
			}
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
		fmt.Fprintf(&b, "%s=%s", op, strings.Join(r[op], "|"))
	}
	return b.String()
}

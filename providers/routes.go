package providers

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Routes names the providers that serve each operation saldo originates
// (card charges to one PSP, Pix to another, ...), in failover order: the
// first that takes the operation's destination takes every new operation
// (Takers); a payout's next attempt after a transient failure may go to
// the next one that takes it (Next, payouts.RetryPolicy). One route may
// name providers that pay different kinds of destination (bank_payout=
// pix|stripe: a Brazilian bank account goes to the Pix PSP, a Stripe bank
// account to Stripe), each provider declaring what it takes
// (Capabilities.Destinations). A refund is never routed: it always goes
// to the provider of the charge it returns, whatever the routes say, so a
// refund route is refused.
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

// Lookup finds a configured provider by name.
type Lookup func(name string) (Provider, bool)

// takes reports whether the provider lookup finds as name takes op to a
// destination of kind (one it does not find takes nothing).
func takes(lookup Lookup, name string, op Operation, kind DestinationKind) bool {
	p, ok := lookup(name)
	return ok && p.Capabilities().Takes(op, kind)
}

// Takers returns the providers of op's route, in failover order, that take
// op to a destination of kind (Capabilities.Takes; kind "" for an
// operation without a destination). Empty when op has no route or no
// provider of it takes kind.
func (r Routes) Takers(op Operation, kind DestinationKind, lookup Lookup) []string {
	var out []string
	for _, name := range r[op] {
		if takes(lookup, name, op, kind) {
			out = append(out, name)
		}
	}
	return out
}

// Next returns the provider after current in op's failover order that
// takes op to a destination of kind (around to the first after the last),
// or current itself when no other provider of the route takes it (or the
// route does not name current): a failover never hands an operation to a
// provider that cannot pay its destination.
func (r Routes) Next(op Operation, current string, kind DestinationKind, lookup Lookup) string {
	list := r[op]
	i := slices.Index(list, current)
	if i < 0 {
		return current
	}
	for j := 1; j < len(list); j++ {
		if name := list[(i+j)%len(list)]; takes(lookup, name, op, kind) {
			return name
		}
	}
	return current
}

// Check verifies every route against the configured providers: each
// provider it names is configured, supports its operation and, for an
// operation that carries a destination, takes at least one kind of
// destination for it. saldo serve refuses to start otherwise.
func (r Routes) Check(provs map[string]Provider) error {
	for _, op := range slices.Sorted(maps.Keys(r)) {
		for _, name := range r[op] {
			p, ok := provs[name]
			if !ok {
				return fmt.Errorf("providers: %s is routed to %q, which is not configured", op, name)
			}
			c := p.Capabilities()
			if !c.Supports(op) {
				return fmt.Errorf("providers: %s is routed to %q, which does not support it", op, name)
			}
			if op.HasDestination() && len(c.Destinations[op]) == 0 {
				return fmt.Errorf("providers: %s is routed to %q, which pays no kind of destination for it", op, name)
			}
		}
	}
	return nil
}

// Kinds lists the destination kinds the providers of op's route take, in
// route order without repeats, for messages.
func (r Routes) Kinds(op Operation, lookup Lookup) []DestinationKind {
	var out []DestinationKind
	for _, name := range r[op] {
		if p, ok := lookup(name); ok {
			for _, k := range p.Capabilities().Destinations[op] {
				if !slices.Contains(out, k) {
					out = append(out, k)
				}
			}
		}
	}
	return out
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

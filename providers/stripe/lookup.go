package stripe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/saldo/saldo/providers"
)

// ErrInconclusive is set (wrapped) as a lookup's Exchange.Err when the
// answer could not prove absence: any answer but a 200, a list page that
// did not cover the whole list, or an unreadable body. The attempts core treats it as a
// failed lookup, never as "not found" (R16).
var ErrInconclusive = errors.New("stripe: lookup inconclusive")

// listLimit is Stripe's largest page.
const listLimit = 100

// Lookup finds the operation by our reference in ONE exchange (R12):
//
//   - card_charge: the Search API,
//     GET /v1/payment_intents/search?query=metadata['saldo_reference']:'<ref>'.
//     Search is eventually consistent (usually under a minute, up to an
//     hour in incidents), hence the long ConsistencyWindow: before it, not
//     found proves nothing (R16);
//   - account_transfer: GET /v1/transfers?transfer_group=<ref> (each
//     transfer is its own group), matched on metadata;
//   - refund, bank_payout: neither is searchable nor filterable by
//     metadata (nor by anything the reference leads to), so GET
//     /v1/refunds (or /v1/payouts) for the newest page of 100, matched on
//     metadata. "Not found" is reported only when that page is the whole
//     list (has_more false); otherwise the lookup is inconclusive
//     (ErrInconclusive), never a false absence. No created-time filter:
//     Lookup does not know when the attempt was made, and an object older
//     than any fixed range would read as absent.
//
// Several matches (only possible if a key expired and a request was sent
// again) report the one that moved money first, as the sim does.
func (p *Provider) Lookup(ctx context.Context, op providers.Operation, reference string) (providers.LookupResult, error) {
	q := url.Values{}
	path, want := "", objectList
	switch op {
	case providers.OpCardCharge:
		path, want = "/v1/payment_intents/search", objectSearch
		q.Set("query", fmt.Sprintf("metadata['%s']:'%s'", MetadataReference, searchEscape(reference)))
		q.Set("limit", strconv.Itoa(listLimit))
	case providers.OpAccountTransfer:
		path = "/v1/transfers"
		q.Set("transfer_group", reference)
		q.Set("limit", strconv.Itoa(listLimit))
	case providers.OpRefund, providers.OpBankPayout:
		path = "/v1/refunds"
		if op == providers.OpBankPayout {
			path = "/v1/payouts"
		}
		q.Set("limit", strconv.Itoa(listLimit))
	default:
		return providers.LookupResult{}, fmt.Errorf("%w: lookup of %s at stripe", providers.ErrUnsupported, op)
	}
	ex := p.client.Do(ctx, http.MethodGet, p.baseURL+path+"?"+q.Encode(), p.headers(), nil)
	ex.Err, ex.Body = p.redactErr(ex.Err), p.redactBody(ex.Body)
	res := providers.LookupResult{Exchange: ex}
	if ex.StatusCode == http.StatusUnauthorized || ex.StatusCode == http.StatusForbidden {
		// Inconclusive (never "not found"): the attempt keeps waiting for a
		// lookup that can answer, and an operator must fix the key.
		p.log.Error("stripe: lookup refused: the API key is wrong, revoked or lacks a permission; unknown attempts stay unresolved until an operator fixes it",
			"status", ex.StatusCode, "operation", string(op), "request_id", ex.ProviderRequestID)
	}
	if ex.Err != nil {
		return res, nil
	}
	if ex.StatusCode != http.StatusOK {
		// Every lookup is a list or search endpoint, which answers "no
		// such object" with a 200 and an empty list, never a 404 or 204: a
		// non-200 (Stripe's 404 "Unrecognized request URL", a proxy's
		// page, a 204, a 5xx, a 429) is a wrong URL or no answer, and
		// proves nothing (R16, docs/pitfalls.md).
		res.Exchange.Err = fmt.Errorf("%w: %s: HTTP %d is not a list", ErrInconclusive, path, ex.StatusCode)
		return res, nil
	}
	views, hasMore, err := parseList(op, want, ex.Body)
	if err != nil {
		res.Exchange.Err = fmt.Errorf("%w: %s: %w", ErrInconclusive, path, err)
		return res, nil
	}
	var best *view
	rank := func(v view) int {
		switch v.State {
		case providers.StateSucceeded:
			return 0
		case providers.StateProcessing:
			return 1
		}
		return 2
	}
	for i := range views {
		v := views[i]
		if v.Reference != reference || v.Operation != op {
			continue
		}
		if best == nil || rank(v) < rank(*best) || (rank(v) == rank(*best) && v.Created.Before(best.Created)) {
			best = &views[i]
		}
	}
	if best == nil {
		if hasMore && op != providers.OpCardCharge && op != providers.OpAccountTransfer {
			res.Exchange.Err = fmt.Errorf("%w: %s: not on the newest page of %d and more exist", ErrInconclusive, path, len(views))
		}
		return res, nil // a clean "not found" (not proof before the consistency window, R16)
	}
	res.Found = true
	res.ProviderID, res.State = best.ID, best.State
	res.Amount, res.Currency = best.Amount, best.Currency
	res.FailureCode, res.FailureReason = best.FailureCode, best.FailureReason
	res.Data, res.ExpectedBy = best.Data, best.ExpectedBy
	return res, nil
}

// searchEscape escapes a value for a Stripe search query string literal.
func searchEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s)
}

// list is a Stripe list or search result with raw objects. Data and
// HasMore are pointers so that an answer without them (or with them null)
// is told from an empty, complete list.
type list struct {
	Object  string             `json:"object"`
	Data    *[]json.RawMessage `json:"data"`
	HasMore *bool              `json:"has_more"`
}

// The object names of Stripe's list and search answers.
const (
	objectList   = "list"
	objectSearch = "search_result"
)

// parseList reads a list (object "list") or search result (object
// "search_result"), as want says, of op's objects. An answer of the other
// kind, or without its data array or has_more, is an error: only a
// readable, complete answer may say an object is absent (R16).
func parseList(op providers.Operation, want string, body []byte) ([]view, bool, error) {
	var l list
	if err := json.Unmarshal(body, &l); err != nil {
		return nil, false, err
	}
	switch {
	case l.Object != want:
		return nil, false, fmt.Errorf("not a %s (object %q)", want, l.Object)
	case l.Data == nil:
		return nil, false, fmt.Errorf("a %s without its data array", want)
	case l.HasMore == nil:
		return nil, false, fmt.Errorf("a %s without has_more", want)
	}
	out := make([]view, 0, len(*l.Data))
	for _, raw := range *l.Data {
		v, ok := parseObject(op, raw)
		if !ok {
			return nil, false, fmt.Errorf("unreadable %s in list", op)
		}
		out = append(out, v)
	}
	return out, *l.HasMore, nil
}

// lastID is the id of the last object of a list, for starting_after.
func lastID(body []byte) string {
	var l struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &l) != nil || len(l.Data) == 0 {
		return ""
	}
	return l.Data[len(l.Data)-1].ID
}

package stripe

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/saldo/saldo/providers"
)

// ErrStatement is returned (wrapped) when a statement could not be fetched.
var ErrStatement = errors.New("stripe: statement unavailable")

// maxStatementPages bounds one statement's pages per object list.
const maxStatementPages = 1000

// PayoutTransitDays bounds how many days after its creation a bank payout
// may become paid: Stripe sets a payout paid on its arrival_date, which
// is a few business days after creation depending on the country, pushed
// by weekends and bank holidays. Two calendar weeks cover it.
const PayoutTransitDays = 14

// StatementDating is how the statement dates its lines (R19). Every object
// is listed on the day it was created (At is its creation time), and saldo
// records an operation final when Stripe says it is: at once for a card
// charge or a transfer, but on the payout's arrival for a bank payout
// (pending, in_transit, then paid), and when a pending refund succeeds for
// a refund. A payout or refund is thus listed up to PayoutTransitDays
// before the day saldo recorded it paid (providers.StatementDater).
func (p *Provider) StatementDating() map[providers.Operation]providers.StatementDating {
	return map[providers.Operation]providers.StatementDating{
		providers.OpCardCharge:      providers.DefaultStatementDating,
		providers.OpAccountTransfer: providers.DefaultStatementDating,
		providers.OpBankPayout:      {Before: PayoutTransitDays, After: 1},
		providers.OpRefund:          {Before: PayoutTransitDays, After: 1},
	}
}

// Statement lists the objects saldo creates (PaymentIntents, Refunds,
// Transfers, Payouts) created on the UTC day that contains day, each list
// paginated with starting_after until has_more is false (several exchanges:
// Statement is reconciliation, not an attempt's call). Objects without a
// saldo_reference are listed too, with an empty Reference: reconciliation
// must see money saldo did not start. At is the object's creation time.
func (p *Provider) Statement(ctx context.Context, day time.Time) ([]providers.StatementEntry, error) {
	d := day.UTC()
	start := time.Date(d.Year(), d.Month(), d.Day(), 0, 0, 0, 0, time.UTC)
	end := start.AddDate(0, 0, 1)
	var out []providers.StatementEntry
	for _, op := range []providers.Operation{providers.OpCardCharge, providers.OpRefund, providers.OpAccountTransfer, providers.OpBankPayout} {
		path := createPath[op]
		after := ""
		for page := 0; ; page++ {
			if page == maxStatementPages {
				return nil, fmt.Errorf("%w: %s %s: more than %d pages", ErrStatement, start.Format(time.DateOnly), path, page)
			}
			q := url.Values{}
			q.Set("created[gte]", strconv.FormatInt(start.Unix(), 10))
			q.Set("created[lt]", strconv.FormatInt(end.Unix(), 10))
			q.Set("limit", strconv.Itoa(listLimit))
			if after != "" {
				q.Set("starting_after", after)
			}
			ex := p.client.Do(ctx, http.MethodGet, p.baseURL+path+"?"+q.Encode(), p.headers(), nil)
			if ex.Err != nil {
				return nil, fmt.Errorf("%w: %s %s: %w", ErrStatement, start.Format(time.DateOnly), path, p.redactErr(ex.Err))
			}
			if ex.StatusCode != http.StatusOK {
				return nil, fmt.Errorf("%w: %s %s: status %d", ErrStatement, start.Format(time.DateOnly), path, ex.StatusCode)
			}
			views, more, err := parseList(op, objectList, ex.Body)
			if err != nil {
				return nil, fmt.Errorf("%w: %s %s: %w", ErrStatement, start.Format(time.DateOnly), path, err)
			}
			for _, v := range views {
				out = append(out, providers.StatementEntry{Operation: v.Operation, Reference: v.Reference, ProviderID: v.ID,
					State: v.State, Amount: v.Amount, Currency: v.Currency, At: v.Created})
			}
			if !more {
				break
			}
			after = lastID(ex.Body)
			if after == "" {
				return nil, fmt.Errorf("%w: %s %s: has_more without objects", ErrStatement, start.Format(time.DateOnly), path)
			}
		}
	}
	return out, nil
}

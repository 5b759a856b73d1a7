package charges

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/saldo/saldo/internal/sqlcols"
	"github.com/saldo/saldo/money"
)

// FeeRule is what the platform takes from a charge: Percent of the gross
// amount (0-100, at most 4 decimal places) plus Fixed, an amount in the
// charge's currency (at most its minor units).
type FeeRule struct {
	Percent decimal.Decimal `json:"percent"`
	Fixed   decimal.Decimal `json:"fixed"`
}

// SplitRule gives part of a charge to another merchant (the recipient's
// available balance is credited when the charge is paid). Exactly one of
// Percent (of the NET amount, after the fee; 0 < p <= 100, at most 4 decimal
// places) or Amount (a fixed amount in the charge's currency) is set.
type SplitRule struct {
	RecipientID string          `json:"recipient_id"`
	Percent     decimal.Decimal `json:"percent,omitzero"`
	Amount      decimal.Decimal `json:"amount,omitzero"`
}

// Breakdown is how a charge's gross amount is divided when it is paid.
// Fee + MerchantNet + the sum of Splits[i].Amount == Gross, exactly.
type Breakdown struct {
	Gross       decimal.Decimal
	Fee         decimal.Decimal
	Net         decimal.Decimal // Gross - Fee
	Splits      []SplitShare
	MerchantNet decimal.Decimal // Net - sum of splits: the merchant keeps the remainder
}

// SplitShare is one split rule and the amount it gave.
type SplitShare struct {
	Rule   SplitRule
	Amount decimal.Decimal
}

var (
	hundred    = decimal.NewFromInt(100)
	maxPercent = int32(4)
)

// Compute divides gross (in currency cur) by the fee rule and the split
// rules. The rounding rule, deterministic and documented:
//
//   - fee = round_half_up(gross × Percent / 100, minor units) + Fixed,
//     capped at gross (a fee never exceeds the charge);
//   - net = gross − fee;
//   - a percentage split = floor(net × Percent / 100, minor units), so
//     percentages never round up past the net; a fixed split is its amount;
//   - the merchant keeps net − Σ splits, which includes every rounding
//     remainder, so the parts always sum exactly to gross.
//
// Splits must fit in the net: the percentages sum to at most 100 and the
// split amounts to at most net; otherwise a *FieldError names the first
// split (splits[i].percent or splits[i].amount) that does not fit.
func Compute(gross decimal.Decimal, cur money.Currency, fee FeeRule, splits []SplitRule) (Breakdown, error) {
	minor := cur.MinorUnits()
	if err := validateFeeRule(fee, cur); err != nil {
		return Breakdown{}, err
	}
	f := gross.Mul(fee.Percent).Div(hundred).Round(minor).Add(fee.Fixed)
	if f.GreaterThan(gross) {
		f = gross
	}
	b := Breakdown{Gross: gross, Fee: f, Net: gross.Sub(f)}
	left := b.Net
	pctSum := decimal.Zero
	for i, r := range splits {
		var amt decimal.Decimal
		if r.Percent.IsPositive() {
			pctSum = pctSum.Add(r.Percent)
			if pctSum.GreaterThan(hundred) {
				return Breakdown{}, invalid(fmt.Sprintf("splits[%d].percent", i), "split percentages add up to %s%%, more than 100%%", pctSum)
			}
			amt = b.Net.Mul(r.Percent).Div(hundred).RoundDown(minor)
		} else {
			amt = r.Amount
		}
		if amt.GreaterThan(left) {
			field := fmt.Sprintf("splits[%d].amount", i)
			if r.Percent.IsPositive() {
				field = fmt.Sprintf("splits[%d].percent", i)
			}
			return Breakdown{}, invalid(field, "splits add up to more than the net amount %s after the fee %s",
				b.Net.StringFixed(minor), f.StringFixed(minor))
		}
		left = left.Sub(amt)
		b.Splits = append(b.Splits, SplitShare{Rule: r, Amount: amt})
	}
	b.MerchantNet = left
	return b, nil
}

func validateFeeRule(r FeeRule, cur money.Currency) error {
	if r.Percent.IsNegative() || r.Percent.GreaterThan(hundred) {
		return invalid("fee.percent", "must be between 0 and 100")
	}
	if !r.Percent.Equal(r.Percent.Round(maxPercent)) {
		return invalid("fee.percent", "at most %d decimal places", maxPercent)
	}
	if r.Fixed.IsNegative() {
		return invalid("fee.fixed", "must not be negative")
	}
	if !r.Fixed.Equal(r.Fixed.Round(cur.MinorUnits())) {
		return invalid("fee.fixed", "%s takes at most %d decimal places", cur.Code(), cur.MinorUnits())
	}
	return nil
}

// validateSplits checks the shape of split rules (recipients, one of
// percent or amount, decimals); Compute checks that they fit.
func validateSplits(merchantID string, cur money.Currency, splits []SplitRule) error {
	if len(splits) > 20 {
		return invalid("splits", "at most 20 split rules")
	}
	seen := map[string]bool{}
	for i, r := range splits {
		p := fmt.Sprintf("splits[%d]", i)
		switch {
		case r.RecipientID == "":
			return invalid(p+".recipient_id", "required")
		case r.RecipientID == merchantID:
			// The charging merchant keeps the remainder. The answer is the
			// one an unknown recipient gets (requireRecipient).
			return invalid(p+".recipient_id", notARecipient)
		case seen[r.RecipientID]:
			return invalid(p+".recipient_id", "recipient %q appears twice", r.RecipientID)
		}
		seen[r.RecipientID] = true
		hasPct, hasAmt := !r.Percent.IsZero(), !r.Amount.IsZero()
		switch {
		case hasPct == hasAmt:
			return invalid(p, "set exactly one of percent or amount")
		case hasPct && (r.Percent.IsNegative() || r.Percent.GreaterThan(hundred)):
			return invalid(p+".percent", "must be greater than 0 and at most 100")
		case hasPct && !r.Percent.Equal(r.Percent.Round(maxPercent)):
			return invalid(p+".percent", "at most %d decimal places", maxPercent)
		case hasAmt && r.Amount.IsNegative():
			return invalid(p+".amount", "must be greater than 0")
		case hasAmt && !r.Amount.Equal(r.Amount.Round(cur.MinorUnits())):
			return invalid(p+".amount", "%s takes at most %d decimal places", cur.Code(), cur.MinorUnits())
		}
	}
	return nil
}

// SetFeeRule sets a merchant's fee rule for one currency; merchantID ""
// sets the platform's default for that currency (used when a merchant has
// no rule of its own). It applies to charges created afterwards: a charge
// keeps the rule it was created with.
func (s *Service) SetFeeRule(ctx context.Context, merchantID string, cur money.Currency, r FeeRule) error {
	if cur.IsZero() {
		return invalid("currency", "required")
	}
	if err := validateFeeRule(r, cur); err != nil {
		return err
	}
	if merchantID != "" {
		if err := s.requireMerchant(ctx, "merchant_id", merchantID); err != nil {
			return err
		}
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE charge_fee_rules SET percent = $3, fixed = $4, updated_at = $5
			WHERE coalesce(merchant_id, '') = $1 AND currency = $2`, merchantID, cur.Code(), r.Percent, r.Fixed, s.clock.Now())
		if err != nil || tag.RowsAffected() == 1 {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO charge_fee_rules (merchant_id, currency, percent, fixed, updated_at)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (coalesce(merchant_id, ''), currency)
			DO UPDATE SET percent = EXCLUDED.percent, fixed = EXCLUDED.fixed, updated_at = EXCLUDED.updated_at`,
			sqlcols.Nullable(merchantID), cur.Code(), r.Percent, r.Fixed, s.clock.Now())
		return err
	})
}

// FeeRuleFor returns the rule a new charge of this merchant in this currency
// gets: the merchant's own, else the platform default for the currency, else
// Config.DefaultFee.
func (s *Service) FeeRuleFor(ctx context.Context, db dbtx, merchantID string, cur money.Currency) (FeeRule, error) {
	var r FeeRule
	err := db.QueryRow(ctx, `SELECT percent, fixed FROM charge_fee_rules
		WHERE (merchant_id = $1 OR merchant_id IS NULL) AND currency = $2
		ORDER BY merchant_id NULLS LAST LIMIT 1`, merchantID, cur.Code()).Scan(&r.Percent, &r.Fixed)
	if errors.Is(err, pgx.ErrNoRows) {
		return s.defaultFee, nil
	}
	return r, err
}

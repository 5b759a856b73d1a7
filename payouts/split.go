package payouts

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/saldo/saldo/internal/intent"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/internal/sqlcols"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers"
)

// MaxSplitLegs bounds the legs of one split payout.
const MaxSplitLegs = 100

// SplitLeg is one recipient of a split payout.
type SplitLeg struct {
	Operation   providers.Operation // pix_transfer, bank_payout or account_transfer
	Amount      money.Amount
	Destination *providers.Destination
	Description string
}

// SplitRequest pays several recipients from one merchant balance: all legs
// are reserved in one transaction or none is.
type SplitRequest struct {
	MerchantID  string
	ClientKey   string
	Legs        []SplitLeg
	Description string
	Metadata    map[string]string
}

// Split is a split payout with its legs. Status aggregates the legs:
// processing while any leg is processing, succeeded when all succeeded,
// failed when all failed, partially_failed when final with both.
type Split struct {
	ID          string            `json:"id"`
	MerchantID  string            `json:"merchant_id"`
	Total       money.Amount      `json:"total"`
	Description string            `json:"description,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	Status      SplitStatus       `json:"status"`
	Legs        []Payout          `json:"legs"`
	CreatedAt   time.Time         `json:"created_at"`
	// LegsNeedingAttention are the legs a human must look at, as a
	// payout's NeedsAttention says (its current attempt open and in
	// review, or an unsettled divergence on any of its attempts: a leg
	// shown failed whose money left). The legs' statuses alone would
	// hide them (found by review).
	LegsNeedingAttention []string `json:"legs_needing_attention,omitempty"`
}

// SplitStatus aggregates leg statuses.
type SplitStatus string

// Split statuses.
const (
	SplitProcessing      SplitStatus = "processing"
	SplitSucceeded       SplitStatus = "succeeded"
	SplitFailed          SplitStatus = "failed"
	SplitPartiallyFailed SplitStatus = "partially_failed"
)

func aggregate(legs []Payout) SplitStatus {
	var ok, failed int
	for _, l := range legs {
		switch l.Status {
		case StatusProcessing:
			return SplitProcessing
		case StatusSucceeded:
			ok++
		case StatusFailed:
			failed++
		}
	}
	switch {
	case failed == 0:
		return SplitSucceeded
	case ok == 0:
		return SplitFailed
	default:
		return SplitPartiallyFailed
	}
}

// CreateSplit validates every leg and, in ONE transaction, inserts the split
// and its legs (each a payout of kind split_leg with its own attempt and key)
// and reserves every leg. If the merchant cannot afford the total, nothing is
// written. A failed leg later releases only its own reserve.
func (s *Service) CreateSplit(ctx context.Context, req SplitRequest) (Split, error) {
	if len(req.Legs) == 0 {
		return Split{}, invalid("legs", "at least one leg")
	}
	if len(req.Legs) > MaxSplitLegs {
		return Split{}, invalid("legs", "at most %d legs", MaxSplitLegs)
	}
	if err := validateCommon(req.Legs[0].Amount, req.Description, req.Metadata); err != nil {
		return Split{}, err
	}
	if err := checkCurrency("currency", req.Legs[0].Operation, req.Legs[0].Destination, req.Legs[0].Amount.Currency()); err != nil {
		return Split{}, err
	}
	currency := req.Legs[0].Amount.Currency().Code()
	total := decimal.Zero
	hashParts := []any{"split", req.Description, req.Metadata}
	legProviders := make([]string, len(req.Legs))
	for i, l := range req.Legs {
		field := fmt.Sprintf("legs[%d]", i)
		if !payoutOperation(l.Operation) {
			return Split{}, invalid(field+".operation", "must be pix_transfer, bank_payout or account_transfer")
		}
		if !attempts.KindSplitLeg.Allows(l.Operation) {
			return Split{}, invalid(field+".operation", "%s cannot realise a split leg here", l.Operation)
		}
		if err := validateCommon(l.Amount, l.Description, nil); err != nil {
			fe := err.(*FieldError)
			return Split{}, invalid(field+"."+fe.Field, "%s", fe.Reason)
		}
		if l.Amount.Currency().Code() != currency {
			return Split{}, invalid(field+".amount", "currency %s differs from the first leg's %s", l.Amount.Currency().Code(), currency)
		}
		dest, err := ValidateDestination(l.Operation, l.Destination)
		if err != nil {
			fe := err.(*FieldError)
			return Split{}, invalid(field+"."+fe.Field, "%s", fe.Reason)
		}
		req.Legs[i].Destination = dest
		if err := checkCurrency("currency", l.Operation, dest, l.Amount.Currency()); err != nil {
			return Split{}, err
		}
		total = total.Add(l.Amount.Decimal())
		hashParts = append(hashParts, l.Operation, l.Amount.String(), currency, dest, l.Description)
	}
	totalAmount, err := toAmount(total, currency)
	if err != nil {
		return Split{}, invalid("legs", "%v", err)
	}
	if err := checkClientKey(req.ClientKey); err != nil {
		return Split{}, err
	}
	hash := intent.RequestHash(hashParts...)
	// The routes, a provider's encoding or the balance its own reserves
	// took (on a process whose account cache is empty) may have changed
	// since a first request with this key.
	refused := func(err error) (Split, error) {
		return answerFromKey(ctx, s, req.MerchantID, req.ClientKey, hash, "split", err, s.getSplit)
	}
	for i, l := range req.Legs {
		field := fmt.Sprintf("legs[%d]", i)
		provider, err := s.providerFor(field, l.Operation, l.Destination)
		if err != nil {
			return refused(err)
		}
		legProviders[i] = provider
		if err := s.checkEncodable(provider, operationInput(&Payout{ID: "po_check", MerchantID: req.MerchantID,
			Operation: l.Operation, Amount: l.Amount, Destination: l.Destination, Description: l.Description})); err != nil {
			fe := err.(*FieldError)
			return refused(invalid(join(field, fe.Field), "%s", fe.Reason))
		}
	}
	if err := s.prepareSplit(ctx, req.MerchantID, totalAmount, legProviders); err != nil {
		return refused(err)
	}

	var out Split
	// The split's id is made once, before the transaction: after an error
	// that may have committed (a lost COMMIT answer) it is looked for.
	spID := intent.NewID("sp_")
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		existing, err := s.claimClientKey(ctx, tx, req.MerchantID, req.ClientKey, hash, "split", spID)
		if err != nil || existing != "" {
			if err == nil {
				out, err = s.getSplit(ctx, tx, req.MerchantID, existing)
			}
			return err
		}
		sp := Split{ID: spID, MerchantID: req.MerchantID, Total: totalAmount, Description: req.Description,
			Metadata: req.Metadata, Status: SplitProcessing, CreatedAt: s.clock.Now()}
		meta, _ := json.Marshal(sqlcols.OrEmpty(req.Metadata))
		if _, err := tx.Exec(ctx, `INSERT INTO splits (id, merchant_id, currency, total, leg_count, description, metadata, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, sp.ID, sp.MerchantID, currency, total, len(req.Legs),
			sqlcols.Nullable(req.Description), meta, sp.CreatedAt); err != nil {
			return err
		}
		for i, l := range req.Legs {
			idx := i
			p := Payout{ID: intent.NewID("po_"), MerchantID: req.MerchantID, Kind: attempts.KindSplitLeg, Operation: l.Operation,
				Provider: legProviders[i], Amount: l.Amount, Destination: l.Destination, Description: l.Description,
				SplitID: sp.ID, LegIndex: &idx, Status: StatusProcessing}
			if err := s.insertWithAttempt(ctx, tx, &p, operationInput(&p)); err != nil {
				return err
			}
			sp.Legs = append(sp.Legs, p)
		}
		out = sp
		return nil
	})
	if err != nil {
		// Committed after all: that split, all its legs reserved, is the
		// answer (issue 13, R22), as for a payout (committedAfterError).
		if sp, gerr := s.getSplit(context.WithoutCancel(ctx), s.pool, req.MerchantID, spID); gerr == nil {
			s.log.WarnContext(ctx, "payouts: a split's transaction answered an error but committed; answering what it made",
				"split_id", spID, "error", err)
			return sp, nil
		}
	}
	return out, err
}

// prepareSplit checks, before its transaction, what a validated split
// request depends on besides its shape (the merchant, the balance on a
// process that never reserved in the currency) and makes the accounts its
// legs touch. Nothing it refuses leaves a row behind.
func (s *Service) prepareSplit(ctx context.Context, merchantID string, total money.Amount, legProviders []string) error {
	if err := s.requireMerchant(ctx, merchantID); err != nil {
		return err
	}
	if err := s.requireFunded(ctx, merchantID, total.Currency(), &total); err != nil {
		return err
	}
	for _, provider := range slices.Compact(slices.Sorted(slices.Values(legProviders))) {
		if err := s.prepareAccounts(ctx, merchantID, provider, total.Currency()); err != nil {
			return err
		}
	}
	return nil
}

// GetSplit returns a merchant's split with its legs and aggregate status.
func (s *Service) GetSplit(ctx context.Context, merchantID, id string) (Split, error) {
	if merchantID == "" {
		return Split{}, ErrNotFound
	}
	return s.getSplit(ctx, s.pool, merchantID, id)
}

func (s *Service) getSplit(ctx context.Context, db dbtx, merchantID, id string) (Split, error) {
	var sp Split
	var currency string
	var total decimal.Decimal
	var description *string
	var meta []byte
	err := db.QueryRow(ctx, `SELECT id, merchant_id, currency, total, description, metadata, created_at
		FROM splits WHERE id = $1 AND merchant_id = $2`, id, merchantID).
		Scan(&sp.ID, &sp.MerchantID, &currency, &total, &description, &meta, &sp.CreatedAt)
	if err == pgx.ErrNoRows {
		return sp, ErrNotFound
	}
	if err != nil {
		return sp, err
	}
	if sp.Total, err = toAmount(total, currency); err != nil {
		return sp, err
	}
	sp.Description = sqlcols.Deref(description)
	_ = json.Unmarshal(meta, &sp.Metadata)
	if len(sp.Metadata) == 0 {
		sp.Metadata = nil
	}
	rows, err := db.Query(ctx, `SELECT `+payoutColumns+` FROM payouts WHERE split_id = $1 ORDER BY leg_index`, id)
	if err != nil {
		return sp, err
	}
	sp.Legs, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Payout, error) { return scanPayout(r) })
	if err != nil {
		return sp, err
	}
	sp.Status = aggregate(sp.Legs)
	rows, err = db.Query(ctx, `SELECT p.id FROM payouts p JOIN attempts a ON a.direction = 'out' AND a.subject_id = p.id
		WHERE p.split_id = $1 AND ((a.id = p.current_attempt_id AND a.review AND a.status IN ('pending', 'unknown'))
			OR (a.diverged_at IS NOT NULL AND a.divergence_settled_at IS NULL))
		GROUP BY p.id, p.leg_index ORDER BY p.leg_index`, id)
	if err != nil {
		return sp, err
	}
	sp.LegsNeedingAttention, err = pgx.CollectRows(rows, pgx.RowTo[string])
	return sp, err
}

package api

import (
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
)

// The wire shapes. Amounts are strings in major units with their currency
// beside them ("10.50", "BRL"), never JSON numbers.

// PayoutJSON is a payout on the wire (also the data of payout notifications).
type PayoutJSON struct {
	ID               string                 `json:"id"`
	MerchantID       string                 `json:"merchant_id"`
	Kind             string                 `json:"kind"`
	Operation        string                 `json:"operation"`
	Provider         string                 `json:"provider"`
	Amount           string                 `json:"amount"`
	Currency         string                 `json:"currency"`
	Destination      *providers.Destination `json:"destination,omitempty"`
	Description      string                 `json:"description,omitempty"`
	Metadata         map[string]string      `json:"metadata,omitempty"`
	ChargeID         string                 `json:"charge_id,omitempty"`
	SplitID          string                 `json:"split_id,omitempty"`
	LegIndex         *int                   `json:"leg_index,omitempty"`
	Status           string                 `json:"status"`
	FailureCode      string                 `json:"failure_code,omitempty"`
	FailureReason    string                 `json:"failure_reason,omitempty"`
	CurrentAttemptID string                 `json:"current_attempt_id,omitempty"`
	AttemptCount     int                    `json:"attempt_count"`
	CreatedAt        time.Time              `json:"created_at"`
	UpdatedAt        time.Time              `json:"updated_at"`
}

func payoutJSON(p payouts.Payout) PayoutJSON {
	out := PayoutJSON{ID: p.ID, MerchantID: p.MerchantID, Kind: string(p.Kind), Operation: string(p.Operation),
		Provider: p.Provider, Amount: p.Amount.Format(), Currency: p.Amount.Currency().Code(), Destination: p.Destination,
		Description: p.Description, Metadata: p.Metadata, ChargeID: p.ChargeID, SplitID: p.SplitID, LegIndex: p.LegIndex,
		Status: string(p.Status), FailureCode: p.FailureCode, FailureReason: p.FailureReason,
		AttemptCount: p.AttemptCount, CreatedAt: p.CreatedAt.UTC(), UpdatedAt: p.UpdatedAt.UTC()}
	if p.CurrentAttemptID != nil {
		out.CurrentAttemptID = p.CurrentAttemptID.String()
	}
	return out
}

type payoutViewJSON struct {
	PayoutJSON
	NeedsAttention bool          `json:"needs_attention"`
	Attempts       []attemptJSON `json:"attempts"`
}

func payoutViewJSONOf(v payouts.View) payoutViewJSON {
	// payouts.View.NeedsAttention is the current attempt open and in
	// review, or an attempt the provider reported paid after it was
	// resolved failed (an unsettled divergence: a failed payout whose
	// money left needs a human as much as an open one).
	out := payoutViewJSON{PayoutJSON: payoutJSON(v.Payout), Attempts: []attemptJSON{},
		NeedsAttention: v.NeedsAttention}
	for _, a := range v.Attempts {
		aj := attemptJSON{ID: a.ID.String(), Kind: string(v.Kind), SubjectID: v.ID, Provider: v.Provider,
			Operation: string(v.Operation), Reference: a.Reference, Status: string(a.Status), ProviderID: a.ProviderID,
			FailureCode: a.FailureCode, FailureReason: a.FailureReason, CallCount: a.CallCount, Review: a.Review,
			CreatedAt: a.CreatedAt.UTC(), ResolvedAt: utcPtr(a.ResolvedAt), Events: eventsJSON(a.Events)}
		out.Attempts = append(out.Attempts, aj)
	}
	return out
}

type attemptJSON struct {
	ID            string `json:"id"`
	Kind          string `json:"kind"`
	SubjectID     string `json:"subject_id"`
	Provider      string `json:"provider"`
	Operation     string `json:"operation"`
	Reference     string `json:"reference"`
	Status        string `json:"status"`
	ProviderState string `json:"provider_state,omitempty"`
	ProviderID    string `json:"provider_id,omitempty"`
	FailureCode   string `json:"failure_code,omitempty"`
	FailureReason string `json:"failure_reason,omitempty"`
	CallCount     int    `json:"call_count"`
	LookupCount   int    `json:"lookup_count"`
	// LookupsUnanswered of them proved nothing (transport error, 5xx,
	// 429); UnansweredSince: when the current run of those began.
	LookupsUnanswered int        `json:"lookups_unanswered"`
	UnansweredSince   *time.Time `json:"unanswered_since,omitempty"`
	// LookupsProcessing of them found the operation processing (they do
	// not count toward --max-lookups); ProcessingExpectedBy: when the
	// provider said it expects it to end (R18).
	LookupsProcessing    int         `json:"lookups_processing"`
	ProcessingExpectedBy *time.Time  `json:"processing_expected_by,omitempty"`
	Review               bool        `json:"review"`
	ReviewReason         string      `json:"review_reason,omitempty"`
	ReviewAt             *time.Time  `json:"review_at,omitempty"`
	CreatedAt            time.Time   `json:"created_at"`
	ResolvedAt           *time.Time  `json:"resolved_at,omitempty"`
	ResolvedBy           string      `json:"resolved_by,omitempty"`
	Events               []eventJSON `json:"events,omitempty"`

	// What the provider acknowledged, and a success it reported after the
	// attempt was resolved failed (issue 13 findings 2 and 5).
	AcknowledgedAt  *time.Time `json:"acknowledged_at,omitempty"`
	Acknowledgement string     `json:"acknowledgement,omitempty"`
	DivergedAt      *time.Time `json:"diverged_at,omitempty"`
	Divergence      string     `json:"divergence,omitempty"`
	DivergenceKind  string     `json:"divergence_kind,omitempty"`
	// An operator's settlement of the divergence (it stays as evidence).
	DivergenceSettledAt  *time.Time `json:"divergence_settled_at,omitempty"`
	DivergenceSettledBy  string     `json:"divergence_settled_by,omitempty"`
	DivergenceSettlement string     `json:"divergence_settlement,omitempty"`
}

func attemptJSONOf(a attempts.Attempt, evs []attempts.Event) attemptJSON {
	return attemptJSON{ID: a.ID.String(), Kind: string(a.Kind), SubjectID: a.SubjectID, Provider: a.Provider,
		Operation: a.Operation, Reference: a.Reference, Status: string(a.Status), ProviderState: a.ProviderState,
		ProviderID: a.ProviderID, FailureCode: a.FailureCode, FailureReason: a.FailureReason, CallCount: a.CallCount,
		LookupCount: a.LookupCount, LookupsUnanswered: a.LookupsUnanswered, UnansweredSince: utcPtr(a.UnansweredSince),
		LookupsProcessing: a.LookupsProcessing, ProcessingExpectedBy: utcPtr(a.ProcessingExpectedBy), Review: a.Review, ReviewReason: a.ReviewReason, ReviewAt: utcPtr(a.ReviewAt),
		CreatedAt: a.CreatedAt.UTC(), ResolvedAt: utcPtr(a.ResolvedAt), ResolvedBy: a.ResolvedBy, Events: eventsJSON(evs),
		AcknowledgedAt: utcPtr(a.AcknowledgedAt), Acknowledgement: a.Acknowledgement, DivergedAt: utcPtr(a.DivergedAt),
		Divergence: a.Divergence, DivergenceKind: a.DivergenceKind, DivergenceSettledAt: utcPtr(a.DivergenceSettledAt), DivergenceSettledBy: a.DivergenceSettledBy,
		DivergenceSettlement: a.DivergenceSettlement}
}

type eventJSON struct {
	ID         int64           `json:"id"`
	At         time.Time       `json:"at"`
	Type       string          `json:"type"`
	Actor      string          `json:"actor"`
	ActorID    string          `json:"actor_id,omitempty"`
	FromStatus string          `json:"from_status,omitempty"`
	ToStatus   string          `json:"to_status,omitempty"`
	Reason     string          `json:"reason,omitempty"`
	CallNumber int             `json:"call_number,omitempty"`
	Outcome    string          `json:"outcome,omitempty"`
	StatusCode int             `json:"status_code,omitempty"`
	Error      string          `json:"error,omitempty"`
	Evidence   json.RawMessage `json:"evidence,omitempty"`
}

func eventsJSON(evs []attempts.Event) []eventJSON {
	out := make([]eventJSON, 0, len(evs))
	for _, e := range evs {
		out = append(out, eventJSON{ID: e.ID, At: e.At.UTC(), Type: string(e.Type), Actor: string(e.Actor), ActorID: e.ActorID,
			FromStatus: string(e.FromStatus), ToStatus: string(e.ToStatus), Reason: e.Reason, CallNumber: e.CallNumber,
			Outcome: e.Outcome, StatusCode: e.StatusCode, Error: e.Error, Evidence: e.Evidence})
	}
	return out
}

type splitJSON struct {
	ID          string            `json:"id"`
	MerchantID  string            `json:"merchant_id"`
	Total       string            `json:"total"`
	Currency    string            `json:"currency"`
	Description string            `json:"description,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	Status      string            `json:"status"`
	Legs        []PayoutJSON      `json:"legs"`
	CreatedAt   time.Time         `json:"created_at"`
	// NeedsAttention: some leg needs a human (LegsNeedingAttention).
	NeedsAttention       bool     `json:"needs_attention"`
	LegsNeedingAttention []string `json:"legs_needing_attention"`
}

func splitJSONOf(sp payouts.Split) splitJSON {
	out := splitJSON{ID: sp.ID, MerchantID: sp.MerchantID, Total: sp.Total.Format(), Currency: sp.Total.Currency().Code(),
		Description: sp.Description, Metadata: sp.Metadata, Status: string(sp.Status), Legs: []PayoutJSON{}, CreatedAt: sp.CreatedAt.UTC(),
		NeedsAttention: len(sp.LegsNeedingAttention) > 0, LegsNeedingAttention: append([]string{}, sp.LegsNeedingAttention...)}
	for _, l := range sp.Legs {
		out.Legs = append(out.Legs, payoutJSON(l))
	}
	return out
}

type postingJSON struct {
	TransactionID int64     `json:"transaction_id"`
	Leg           int       `json:"leg"`
	AccountID     int64     `json:"account_id"`
	AccountCode   string    `json:"account_code"`
	Seq           int64     `json:"seq"`
	Amount        string    `json:"amount"`
	Currency      string    `json:"currency"`
	BalanceAfter  string    `json:"balance_after"`
	PostedAt      time.Time `json:"posted_at"`
	Hash          string    `json:"hash"`
}

func postingJSONOf(p ledger.Posting) postingJSON {
	minor := p.Currency.MinorUnits()
	return postingJSON{TransactionID: p.TransactionID, Leg: p.Leg, AccountID: p.AccountID, AccountCode: p.AccountCode,
		Seq: p.Seq, Amount: p.Amount.StringFixed(minor), Currency: p.Currency.Code(),
		BalanceAfter: p.BalanceAfter.StringFixed(minor), PostedAt: p.PostedAt.UTC(), Hash: hex.EncodeToString(p.Hash)}
}

type transactionJSON struct {
	ID             int64             `json:"id"`
	IdempotencyKey string            `json:"idempotency_key"`
	CauseKind      string            `json:"cause_kind"`
	CauseID        string            `json:"cause_id"`
	Description    string            `json:"description,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	EffectiveAt    time.Time         `json:"effective_at"`
	PostedAt       time.Time         `json:"posted_at"`
	ReversesID     int64             `json:"reverses_id,omitempty"`
	Postings       []postingJSON     `json:"postings"`
}

func transactionJSONOf(t ledger.Transaction) transactionJSON {
	out := transactionJSON{ID: t.ID, IdempotencyKey: t.IdempotencyKey, CauseKind: t.CauseKind, CauseID: t.CauseID,
		Description: t.Description, Metadata: t.Metadata, EffectiveAt: t.EffectiveAt.UTC(), PostedAt: t.PostedAt.UTC(),
		ReversesID: t.ReversesID, Postings: []postingJSON{}}
	for _, p := range t.Postings {
		out.Postings = append(out.Postings, postingJSONOf(p))
	}
	return out
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// page is a list response: the items and the cursor of the next page
// ("" / absent at the end).
type page[T any] struct {
	Data       []T    `json:"data"`
	NextCursor string `json:"next_cursor,omitempty"`
}

func pageOf[T any](items []T, next string) page[T] {
	if items == nil {
		items = []T{}
	}
	return page[T]{Data: items, NextCursor: next}
}

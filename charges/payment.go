package charges

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/shopspring/decimal"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/internal/sqlcols"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/providers"
)

// CauseCredit is the ledger cause kind of the transaction that credits a
// paid charge; its cause id is the charge id and its idempotency key
// "charge_credit:<charge id>", so a charge can be credited once, ever.
const CauseCredit = "charge_credit"

// Cob statuses as the BCB API Pix names them (and the sim reports them).
const (
	cobExpired = "EXPIRADA"
	// failureCobExpired is the failure code of an expired cob.
	failureCobExpired = "cob_expired"
)

// cobData is the shape of a pix_charge attempt's Data (SubmitResult.Data,
// LookupResult.Data, WebhookEvent.Data): the cob as the BCB API Pix names
// its fields. An adapter for another PSP must report cobs in this shape.
type cobData struct {
	TxID      string    `json:"txid"`
	Status    string    `json:"status"`
	ExpiresAt time.Time `json:"expires_at"`
	Location  string    `json:"location"`
	CopyPaste string    `json:"pix_copia_e_cola"`
	PaidAt    time.Time `json:"paid_at"`
}

func parseCob(data []byte) (cobData, bool) {
	var c cobData
	if len(data) == 0 || json.Unmarshal(data, &c) != nil {
		return cobData{}, false
	}
	return c, c.TxID != "" && c.CopyPaste != ""
}

// AttemptDiverged implements attempts.DivergenceOwner: the charge as it
// stands (failed or expired, not credited) goes to OnDiverged (its
// notification), in the divergence's transaction; nothing moves.
func (s *Service) AttemptDiverged(ctx context.Context, tx pgx.Tx, a attempts.Attempt) error {
	if s.onDiverged == nil {
		return nil
	}
	c, err := s.get(ctx, tx, "", a.SubjectID)
	if err != nil {
		return fmt.Errorf("charges: charge %s of diverged attempt %s: %w", a.SubjectID, a.ID, err)
	}
	// a's divergence, recorded in tx, is not settled: the charge needs
	// attention in what its merchant is told.
	c.NeedsAttention = true
	return s.onDiverged(ctx, tx, c, a)
}

var _ attempts.DivergenceOwner = (*Service)(nil)

// AttemptFinal is called by the attempts core inside the transaction that
// moves a charge's attempt to succeeded or failed (exactly once per
// attempt: the transition is conditional).
//
//   - succeeded: for a card, captured; for Pix, the cob was PAID (the
//     attempts core keeps a created cob's attempt open, "processing", until
//     a lookup or webhook reports it paid or expired). The credit is posted
//     in this transaction.
//   - failed: the charge fails with the provider's reason; a cob that
//     expired unpaid makes it expired.
//
// It is AttemptsFinal for one attempt, its credit posted at once: one place
// decides a final attempt's effects.
func (s *Service) AttemptFinal(ctx context.Context, tx pgx.Tx, a attempts.Attempt) error {
	var postings ledger.Deferred
	if err := s.AttemptsFinal(ctx, tx, []attempts.Attempt{a}, &postings); err != nil {
		return err
	}
	return postings.Post(ctx, tx)
}

// AttemptAmount implements attempts.AmountOwner: the gross amount and the
// currency of the charge a is for. The attempts core checks every
// provider report naming an amount or currency (webhook, lookup, poll,
// resolver) against them before a report may credit anything (issue 13
// finding 4).
func (s *Service) AttemptAmount(ctx context.Context, db attempts.DB, a attempts.Attempt) (decimal.Decimal, string, error) {
	if err := checkKind(a); err != nil {
		return decimal.Decimal{}, "", err
	}
	var amount decimal.Decimal
	var currency string
	if err := db.QueryRow(ctx, `SELECT amount, currency FROM charges WHERE id = $1`, a.SubjectID).Scan(&amount, &currency); err != nil {
		return decimal.Decimal{}, "", fmt.Errorf("charges: amount of charge %s (attempt %s): %w", a.SubjectID, a.ID, err)
	}
	return amount, currency, nil
}

// AttemptAmounts implements attempts.AmountsOwner: AttemptAmount for many
// attempts, in one statement.
func (s *Service) AttemptAmounts(ctx context.Context, db attempts.DB, as []attempts.Attempt) (map[uuid.UUID]attempts.OwnedAmount, error) {
	for _, a := range as {
		if err := checkKind(a); err != nil {
			return nil, err
		}
	}
	m, err := attempts.AmountsBySubject(ctx, db, `SELECT id, amount, currency FROM charges WHERE id = ANY ($1::text[])`, as)
	if err != nil {
		return nil, fmt.Errorf("charges: amounts of %d charges: %w", len(as), err)
	}
	return m, nil
}

var _ attempts.AmountsOwner = (*Service)(nil)

// checkKind: only card and Pix charge attempts are charges'.
func checkKind(a attempts.Attempt) error {
	if a.Kind != attempts.KindCardCharge && a.Kind != attempts.KindPixCharge {
		return fmt.Errorf("charges: AttemptFinal for a %s attempt", a.Kind)
	}
	return nil
}

// checkFinal: a is the locked charge c's attempt and c is not final yet.
func checkFinal(c Charge, a attempts.Attempt) error {
	if c.AttemptID == nil || *c.AttemptID != a.ID {
		return fmt.Errorf("charges: attempt %s is not the attempt of charge %s", a.ID, c.ID)
	}
	if c.Status.Final() {
		return fmt.Errorf("charges: charge %s is %s; its attempt %s cannot finish again", c.ID, c.Status, a.ID)
	}
	return nil
}

// failure is what a failed attempt makes of its charge.
type failure struct {
	status       Status
	code, reason string
}

// failureOf: the charge fails with the provider's reason; a cob that
// expired unpaid makes it expired.
func failureOf(c Charge, a attempts.Attempt) failure {
	f := failure{status: StatusFailed, code: a.FailureCode, reason: a.FailureReason}
	cob, _ := parseCob(a.Data)
	if c.Kind == KindPix && (a.FailureCode == failureCobExpired || cob.Status == cobExpired) {
		f.status = StatusExpired
	}
	if f.code == "" {
		f.code = "failed"
	}
	return f
}

func (s *Service) logFailed(ctx context.Context, c Charge, a attempts.Attempt, f failure) {
	s.log.InfoContext(ctx, "charge attempt failed", "charge_id", c.ID, "attempt_id", a.ID,
		"reference", a.Reference, "provider", a.Provider, "status", f.status, "failure_code", f.code)
}

// creditInput is the ledger transaction that credits the paid charge c
// (its attempt a): the provider's clearing account debited with the gross
// amount, the merchant, the platform's fees and each split recipient
// credited with their shares (a zero share is not posted).
func (s *Service) creditInput(ctx context.Context, tx pgx.Tx, c Charge, a attempts.Attempt) (ledger.TransactionInput, error) {
	cur := c.Amount.Currency()
	var legs []ledger.PostingInput
	add := func(spec ledger.AccountSpec, amt decimal.Decimal) error {
		if amt.IsZero() {
			return nil // the ledger refuses zero legs; a zero share is simply not posted
		}
		id, err := s.accountID(ctx, tx, spec)
		if err != nil {
			return err
		}
		legs = append(legs, ledger.PostingInput{AccountID: id, Amount: amt, Currency: cur})
		return nil
	}
	if err := add(ledger.ProviderClearing(c.Provider, cur), c.Amount.Decimal().Neg()); err != nil {
		return ledger.TransactionInput{}, err
	}
	if err := add(ledger.MerchantAvailable(c.MerchantID, cur), c.MerchantNet.Decimal()); err != nil {
		return ledger.TransactionInput{}, err
	}
	if err := add(ledger.PlatformFees(cur), c.Fee.Decimal()); err != nil {
		return ledger.TransactionInput{}, err
	}
	for _, sp := range c.Splits {
		if err := add(ledger.MerchantAvailable(sp.RecipientID, cur), sp.Amount.Decimal()); err != nil {
			return ledger.TransactionInput{}, err
		}
	}
	meta := map[string]string{"charge_id": c.ID, "attempt_id": a.ID.String(), "merchant_id": c.MerchantID,
		"reference": a.Reference, "kind": string(c.Kind), "paid_by": a.ResolvedBy}
	if a.ProviderID != "" {
		meta["provider_id"] = a.ProviderID
	}
	return ledger.TransactionInput{
		IdempotencyKey: CauseCredit + ":" + c.ID,
		CauseKind:      CauseCredit,
		CauseID:        c.ID,
		Description: fmt.Sprintf("%s charge %s paid: %s, fee %s, merchant %s, %d splits (attempt %s)",
			c.Kind, c.ID, c.Amount, c.Fee, c.MerchantNet, len(c.Splits), a.ID),
		Metadata: meta,
		Postings: legs,
	}, nil
}

func (s *Service) logPaid(ctx context.Context, c Charge, a attempts.Attempt, txID int64) {
	s.log.InfoContext(ctx, "charge paid and credited", "charge_id", c.ID, "attempt_id", a.ID,
		"reference", a.Reference, "provider", c.Provider, "amount", c.Amount.String(), "fee", c.Fee.String(),
		"merchant_net", c.MerchantNet.String(), "paid_by", a.ResolvedBy, "ledger_tx", txID)
}

// syncAwaiting moves a processing Pix charge to awaiting_payment once its
// open attempt's data shows the cob (txid, copy-and-paste payload, expiry):
// a conditional update, harmless to repeat. The attempts core does not call
// owners for "processing", so charges learns of the cob from the attempt
// wherever it looks (Get, Poll, webhooks, inline submit).
func (s *Service) syncAwaiting(ctx context.Context, c Charge, a attempts.Attempt) (bool, error) {
	if c.Kind != KindPix || c.Status != StatusProcessing || !a.Status.Open() {
		return false, nil
	}
	cob, ok := parseCob(a.Data)
	if !ok || cob.TxID != a.Reference {
		return false, nil
	}
	exp := cob.ExpiresAt
	if exp.IsZero() {
		exp = c.CreatedAt.Add(c.PixExpiresIn)
	}
	tag, err := s.pool.Exec(ctx, `UPDATE charges SET status = 'awaiting_payment', provider_id = COALESCE(provider_id, $2),
		pix_copy_paste = $3, pix_location = $4, pix_expires_at = $5, updated_at = $6
		WHERE id = $1 AND status = 'processing'`, c.ID, sqlcols.Nullable(a.ProviderID), cob.CopyPaste, sqlcols.Nullable(cob.Location),
		exp, s.clock.Now())
	if err != nil {
		return false, err
	}
	if tag.RowsAffected() == 1 {
		s.log.InfoContext(ctx, "pix charge awaiting payment", "charge_id", c.ID, "attempt_id", a.ID,
			"reference", a.Reference, "provider", a.Provider, "expires_at", exp)
		return true, nil
	}
	return false, nil
}

// refresh re-reads a processing Pix charge after syncing it with its attempt.
func (s *Service) refresh(ctx context.Context, c Charge) (Charge, error) {
	if c.Kind != KindPix || c.Status != StatusProcessing || c.AttemptID == nil {
		return c, nil
	}
	a, err := s.attempts.Get(ctx, s.pool, *c.AttemptID)
	if err != nil {
		return c, err
	}
	moved, err := s.syncAwaiting(ctx, c, a)
	if err != nil || !moved {
		return c, err
	}
	return s.get(ctx, s.pool, "", c.ID)
}

// HandleProviderEvent applies a verified provider webhook (the HTTP layer
// verified it with the provider's ParseWebhook) to the charge whose attempt
// has the event's reference. handled is false when the reference is not a
// charge's (the caller offers the event to others, e.g. payouts).
//
// Every event goes through attempts.ResolveByReference (R17: a conditional
// transition, so the resolver, the poll job and the webhook never fight,
// and duplicates and out-of-order events change nothing): a card capture or
// a paid cob credits the charge inside that transition, exactly once; an
// expired cob expires it. A "processing" event for a cob moves the charge to
// awaiting_payment with its payload.
func (s *Service) HandleProviderEvent(ctx context.Context, providerName string, ev providers.WebhookEvent) (bool, error) {
	if ev.Dispute != nil {
		return s.handleDispute(ctx, providerName, ev)
	}
	if ev.Reference == "" {
		return false, nil
	}
	a, err := s.attempts.GetByReference(ctx, s.pool, ev.Reference)
	if errors.Is(err, attempts.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if a.Kind != attempts.KindCardCharge && a.Kind != attempts.KindPixCharge {
		return false, nil
	}
	// The attempts core checks the event's provider, operation, amount and
	// currency against the attempt and the charge (AttemptAmount) before it
	// may credit anything; a mismatch flags the attempt for review with an
	// alert (issue 13 finding 4).
	res, err := s.attempts.ResolveByReference(ctx, attempts.ResolveInput{Reference: ev.Reference, Provider: providerName,
		Operation: ev.Operation, Direction: ev.Direction, Amount: ev.Amount, Currency: ev.Currency, State: ev.State,
		ProviderID: ev.ProviderID, FailureCode: ev.FailureCode, FailureReason: ev.FailureReason, Data: ev.Data,
		ExpectedBy: ev.ExpectedBy, Source: attempts.SourceWebhook, Actor: ev.ID, Reason: fmt.Sprintf("webhook %s (%s)", ev.ID, ev.Type)})
	if errors.Is(err, attempts.ErrReportMismatch) || errors.Is(err, attempts.ErrProviderIDMismatch) {
		// Flagged for review by the attempts core; nothing credited. The
		// webhook answers "review" as it does for a payout's attempt, not
		// a 500 on every redelivery.
		return true, fmt.Errorf("%w: event %s from %s: %w", ErrEventMismatch, ev.ID, providerName, err)
	}
	if err != nil {
		return true, err
	}
	if a.Kind == attempts.KindPixCharge && res.Attempt.Status.Open() {
		c, err := s.get(ctx, s.pool, "", a.SubjectID)
		if err != nil {
			return true, err
		}
		_, err = s.syncAwaiting(ctx, c, res.Attempt)
		return true, err
	}
	return true, nil
}

// handleDispute applies a card dispute the provider reports (ev.Dispute)
// to the card charge whose attempt holds the disputed payment
// (ev.ProviderID) at providerName: attempts.RecordDispute notes every
// report, and the first one that says the money was withdrawn makes the
// succeeded attempt's divergence of kind dispute (R9, R19): review,
// needs_attention, charge.diverged, the charge no longer refundable
// (LockForRefund), the audit reporting it until an operator books it and
// settles it. Nothing moves in the ledger: a dispute may be won (the
// money comes back) or lost, and the operator books what happened.
// A dispute of the second operation recorded on a charge's attempt (the
// card charged twice under its reference) is noted on that attempt only
// (DisputeResult.SecondOperation): the charge's own payment is not
// disputed and stays refundable. handled is false when no charge attempt
// holds the payment or records it as its second operation (the event is
// acknowledged as unmatched).
func (s *Service) handleDispute(ctx context.Context, providerName string, ev providers.WebhookEvent) (bool, error) {
	d := ev.Dispute
	if ev.ProviderID == "" || ev.ID == "" {
		s.log.WarnContext(ctx, "charges: dispute names no payment saldo could hold", "provider", providerName,
			"event_id", ev.ID, "dispute", d.ID)
		return false, nil
	}
	res, err := s.attempts.RecordDispute(ctx, attempts.DisputeReport{Provider: providerName, ProviderID: ev.ProviderID,
		EventID: ev.ID, DisputeID: d.ID, Withdrawn: d.Withdrawn, Note: disputeNote(providerName, ev)})
	if errors.Is(err, attempts.ErrNotFound) {
		s.log.WarnContext(ctx, "charges: dispute of a payment no charge attempt holds or records as a second operation", "provider", providerName,
			"event_id", ev.ID, "dispute", d.ID, "provider_id", ev.ProviderID)
		return false, nil
	}
	if err != nil {
		return true, err
	}
	if res.Attempt.Kind != attempts.KindCardCharge && res.Attempt.Kind != attempts.KindPixCharge {
		// Only a charge's attempt is in; noted on it all the same.
		s.log.ErrorContext(ctx, "charges: dispute of an incoming attempt that is not a charge's", "attempt_id", res.Attempt.ID,
			"kind", res.Attempt.Kind, "event_id", ev.ID)
	}
	if d.Reinstated && !res.Duplicate && !res.SecondOperation && res.Attempt.DivergenceSettledAt != nil {
		// The operator settled the dispute's divergence (booked the
		// withdrawal) before the money came back: what came back is the
		// merchant's again, and only a human books it.
		s.log.ErrorContext(ctx, "charges: disputed funds reinstated after the divergence was settled: book them back to the merchant",
			"attempt_id", res.Attempt.ID, "charge_id", res.Attempt.SubjectID, "dispute", d.ID, "event_id", ev.ID)
	}
	return true, nil
}

// disputeNote is what a dispute report says, for the attempt's note and
// divergence: the dispute, its amount, reason and status, and what the
// operator does about it.
func disputeNote(providerName string, ev providers.WebhookEvent) string {
	d := ev.Dispute
	note := fmt.Sprintf("%s %s %s: dispute %s of %s %s, reason %q, status %q", providerName, ev.Type, ev.ID, d.ID,
		ev.Amount, ev.Currency, d.Reason, d.Status)
	switch {
	case d.Reinstated:
		return note + ": the disputed money came back (won); the operator books back whatever was booked for it and settles the divergence"
	case d.Lost:
		return note + ": the dispute is lost, the money stays withdrawn; the operator books it against the merchant (a negative funding) and settles the divergence"
	case d.Withdrawn:
		return note + ": the card network took the money back from the platform's balance"
	}
	return note + ": an inquiry; nothing was withdrawn"
}

// PollResult says what one Poll did.
type PollResult struct {
	Charge Charge
	// Changed: this poll moved the charge (paid or expired).
	Changed bool
	// RetryIn > 0: the charge still awaits payment; poll again after it.
	RetryIn time.Duration
}

// Poll follows one Pix charge until it is paid or expired (what
// PollPixCharge runs). It moves the charge to awaiting_payment once the
// cob exists, then looks the cob up once per call and hands what the
// provider says to attempts.ResolveByReference (source resolver): paid
// credits the charge inside that transition, exactly once whatever webhooks
// did; expired expires it; active keeps waiting. A lookup that fails or
// finds nothing proves nothing (R16) and is tried again later. A final
// charge returns at once with RetryIn 0.
func (s *Service) Poll(ctx context.Context, chargeID string) (PollResult, error) {
	c, err := s.get(ctx, s.pool, "", chargeID)
	if err != nil {
		return PollResult{}, err
	}
	res := PollResult{Charge: c}
	if c.Status.Final() || c.AttemptID == nil {
		return res, nil
	}
	a, err := s.attempts.Get(ctx, s.pool, *c.AttemptID)
	if err != nil {
		return res, err
	}
	if !a.Status.Open() {
		return res, nil // the attempt's final transition moved the charge
	}

	if moved, err := s.syncAwaiting(ctx, c, a); err != nil {
		return res, err
	} else if moved {
		if c, err = s.get(ctx, s.pool, "", chargeID); err != nil {
			return res, err
		}
		res.Charge = c
	}
	if a.Status == attempts.StatusPending && a.ProviderState != string(providers.StateProcessing) {
		// Not submitted yet (or the call is in flight): nothing to look up.
		res.RetryIn = min(s.pollInterval, 2*time.Second)
		return res, nil
	}
	prov, ok := s.attempts.Provider(c.Provider)
	if !ok {
		return res, fmt.Errorf("charges: charge %s: provider %q not configured in this process", c.ID, c.Provider)
	}
	lr, lerr := prov.Lookup(ctx, providers.OpPixCharge, a.Reference)
	if lerr != nil {
		s.log.WarnContext(ctx, "cob cannot be polled; waiting for webhooks and the resolver", "charge_id", c.ID,
			"reference", a.Reference, "provider", c.Provider, "error", lerr)
		return res, nil
	}
	ex := lr.Exchange
	if ex.Err == nil && ex.StatusCode >= 200 && ex.StatusCode < 300 && lr.Found &&
		(lr.State == providers.StateSucceeded || lr.State == providers.StateFailed) {
		// The attempts core checks the amount and currency the lookup
		// reports against the charge before crediting (issue 13 finding 4).
		rctx := context.WithoutCancel(ctx)
		rr, err := s.attempts.ResolveByReference(rctx, attempts.ResolveInput{Reference: a.Reference, Provider: c.Provider,
			Operation: providers.OpPixCharge, Amount: lr.Amount, Currency: lr.Currency, State: lr.State,
			ProviderID: lr.ProviderID, FailureCode: lr.FailureCode, FailureReason: lr.FailureReason, Data: lr.Data,
			Source: attempts.SourceResolver, Actor: PollPixChargeKind, Reason: "poll: lookup found " + string(lr.State)})
		if errors.Is(err, attempts.ErrReportMismatch) || errors.Is(err, attempts.ErrProviderIDMismatch) {
			// Flagged for review with an alert (or, for a cob paid in the
			// meantime, the second Pix the lookup names recorded as a
			// divergence); nothing credited. The poll goes on: the
			// provider may still report the cob expired, and an operator
			// decides the rest.
			err, rr = nil, attempts.ResolveResult{}
		}
		if err != nil {
			return res, err
		}
		res.Changed = rr.Transitioned
		res.Charge, err = s.get(rctx, s.pool, "", c.ID)
		if err != nil || res.Charge.Status.Final() {
			return res, err
		}
	}
	res.RetryIn = s.pollInterval
	if res.Charge.Pix != nil {
		if until := res.Charge.Pix.ExpiresAt.Sub(s.clock.Now()); until > 0 && until < res.RetryIn {
			res.RetryIn = until + time.Second
		}
	}
	return res, nil
}

// PollPixChargeKind is the River job kind of PollPixChargeArgs.
const PollPixChargeKind = "charges.poll_pix"

// PollPixChargeArgs polls one awaiting Pix charge until it is paid or expired.
type PollPixChargeArgs struct {
	ChargeID string `json:"charge_id" river:"unique"`
}

// Kind implements river.JobArgs.
func (PollPixChargeArgs) Kind() string { return PollPixChargeKind }

var liveJobStates = []rivertype.JobState{
	rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
	rivertype.JobStateRetryable, rivertype.JobStateScheduled,
}

// pollOpts: the poll job is enqueued with the charge and its attempt, in
// the same transaction, and runs at once (it snoozes while the cob is not
// created yet).
func (s *Service) pollOpts() *river.InsertOpts {
	return &river.InsertOpts{Queue: s.queue, MaxAttempts: 25,
		UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: liveJobStates}}
}

// PollPixChargeWorker runs Poll and snoozes until the next look.
type PollPixChargeWorker struct {
	river.WorkerDefaults[PollPixChargeArgs]
	svc *Service
}

// Timeout implements river.Worker.
func (w *PollPixChargeWorker) Timeout(*river.Job[PollPixChargeArgs]) time.Duration {
	return 2 * time.Minute
}

// Work implements river.Worker.
func (w *PollPixChargeWorker) Work(ctx context.Context, job *river.Job[PollPixChargeArgs]) error {
	res, err := w.svc.Poll(ctx, job.Args.ChargeID)
	if errors.Is(err, ErrNotFound) {
		return river.JobCancel(err)
	}
	if err != nil {
		return err
	}
	if res.RetryIn > 0 {
		return river.JobSnooze(res.RetryIn)
	}
	return nil
}

// AddWorkers registers the PollPixCharge worker.
func (s *Service) AddWorkers(w *river.Workers) {
	river.AddWorker(w, &PollPixChargeWorker{svc: s})
}

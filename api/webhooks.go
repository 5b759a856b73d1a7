package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/internal/pgtext"
	"github.com/saldo/saldo/providers"
)

// Webhook outcomes, recorded per event and returned to the provider.
const (
	WebhookTransitioned = "transitioned" // the event changed an attempt's status
	WebhookUnchanged    = "unchanged"    // matched, nothing to change (duplicate state, stale "processing", final already)
	WebhookHandled      = "handled"      // a WebhookHandler (charges) took it
	WebhookUnmatched    = "unmatched"    // no attempt has the reference: not ours, acknowledged and logged
	WebhookReview       = "review"       // the event contradicts the attempt (provider id, provider, operation, amount, currency): flagged for review, nothing moved
	WebhookDuplicate    = "duplicate"    // this event id was processed before
)

type webhookAck struct {
	Received bool   `json:"received"`
	EventID  string `json:"event_id"`
	Outcome  string `json:"outcome"`
	// Refused names the items of the POST that were refused (moved
	// nothing) while the others were applied.
	Refused []string `json:"refused,omitempty"`
}

// RequestWebhookParser is implemented by a provider whose webhooks need
// more than the headers, or carry several events in one POST: the Pix PSP
// (providers/pix) authenticates by a secret in the registered URL's query
// string (?hmac=...) and groups Pix in one {"pix": [...]}. The webhook
// route prefers it to Provider.ParseWebhook.
type RequestWebhookParser interface {
	ParseWebhookRequest(r *http.Request, body []byte, now time.Time) ([]providers.WebhookEvent, error)
}

// webhook receives POST /v1/webhooks/{provider}: verify the signature and
// timestamp with the provider's ParseWebhook (401 when either fails, so a
// forged or replayed event changes nothing), skip an event id seen before,
// then hand the event to the WebhookHandlers and else to the attempts core
// by reference (R17). The resolution is a conditional transition, so a
// duplicate or out-of-order event (a "processing" after "succeeded") never
// downgrades a final status. A failure to process is 500 so the provider
// retries; the event is recorded as seen only once processed.
//
// A RequestWebhookParser may give several events (or none saldo can use)
// for one POST: each is deduplicated and processed in turn, and the
// answer names them all (event_id: their ids joined by commas; outcome:
// the most telling of theirs, see mergeOutcome). An error part way is 500:
// the provider's redelivery skips the events already recorded.
//
// One bad item does not refuse the others (R17): a parser that refuses
// some items of a POST returns the events of the rest with an error that
// has RefusedItems (pix.RefusedItemsError), and an event PostgreSQL could
// not store (Storable) is refused on its own too. A refused item moves
// nothing and never becomes a provider id; it is logged at ERROR (no
// secret: the items' own ids and why) and named in the answer's
// "refused". The POST's status:
//   - some events were usable: they are applied and the answer is 200
//     with "refused" listed. The PSP does not redeliver (the BCB's PSPs
//     redeliver on non-2xx only), which is right: a redelivery carries the
//     same bad item, and a 4xx would keep the good ones waiting for it.
//     What the refused item was about is settled by the resolver's lookup,
//     the Pix charge poll, reconciliation (R19) or review, as for a notice
//     never sent;
//   - no event was usable and some were refused: 400 webhook_malformed,
//     nothing applied, as for a body saldo cannot read at all.
func (s *Server) webhook(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "provider")
	prov, ok := s.cfg.Providers[name]
	if !ok {
		s.problem(w, r, errNotFound)
		return
	}
	body, err := s.readBody(w, r)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	var evs []providers.WebhookEvent
	if rp, ok := prov.(RequestWebhookParser); ok {
		evs, err = rp.ParseWebhookRequest(r, body, s.clock.Now())
	} else {
		var ev providers.WebhookEvent
		ev, err = prov.ParseWebhook(r.Header, body, s.clock.Now())
		if err == nil {
			evs = []providers.WebhookEvent{ev}
		}
	}
	var refused []string
	var partial refusedItems
	if errors.As(err, &partial) {
		refused, err = partial.RefusedItems(), nil
	}
	if err != nil {
		s.log.WarnContext(r.Context(), "api: webhook refused", "provider", name, "error", err)
		s.problem(w, r, err)
		return
	}
	// A backstop: a parser that groups items (Pix) checks Storable itself
	// and names the refused item by its position in the body; an event's
	// index here counts events (an item gives none, one or two), so it
	// names an item only for a provider with one event per POST.
	usable := evs[:0:0]
	for i, ev := range evs {
		if serr := ev.Storable(); serr != nil {
			refused = append(refused, fmt.Sprintf("event %d: %v", i, serr))
			continue
		}
		usable = append(usable, ev)
	}
	evs = usable
	refused = boundRefused(refused)
	if len(refused) > 0 {
		s.log.ErrorContext(r.Context(), "api: webhook items refused: nothing moved for them; a lookup, the poll, reconciliation or review settles what they were about",
			"provider", name, "refused", len(refused), "applied", len(evs), "reasons", strings.Join(refused, "; "))
		if len(evs) == 0 {
			s.problem(w, r, fmt.Errorf("%w: %s", providers.ErrMalformedWebhook, strings.Join(refused, "; ")))
			return
		}
	}
	ack := webhookAck{Received: true, Outcome: WebhookUnmatched, Refused: refused}
	ids := make([]string, 0, len(evs))
	for i, ev := range evs {
		outcome, err := s.processWebhookEvent(r.Context(), name, ev)
		if err != nil {
			s.problem(w, r, err)
			return
		}
		ids = append(ids, ev.ID)
		if i == 0 {
			ack.Outcome = outcome
		} else {
			ack.Outcome = mergeOutcome(ack.Outcome, outcome)
		}
	}
	ack.EventID = strings.Join(ids, ",")
	writeJSON(w, http.StatusOK, ack)
}

// maxRefusedListed and maxRefusedText bound what the answer and the log
// repeat of refused items: their reasons may quote the sender's text.
const (
	maxRefusedListed = 20
	maxRefusedText   = 300
)

// boundRefused keeps the first maxRefusedListed reasons, each cut to
// maxRefusedText bytes (at a rune boundary), and says how many more.
func boundRefused(refused []string) []string {
	out := make([]string, 0, min(len(refused), maxRefusedListed+1))
	for i, r := range refused {
		if i == maxRefusedListed {
			out = append(out, fmt.Sprintf("... and %d more", len(refused)-maxRefusedListed))
			break
		}
		if len(r) > maxRefusedText {
			cut := maxRefusedText
			for cut > 0 && !utf8.RuneStart(r[cut]) {
				cut--
			}
			r = r[:cut] + "..."
		}
		out = append(out, r)
	}
	return out
}

// refusedItems is an error a webhook parser returns with the events of the
// items it did not refuse (pix.RefusedItemsError).
type refusedItems interface {
	error
	RefusedItems() []string
}

// outcomeWeight orders outcomes by how much a human wants to hear of them.
var outcomeWeight = map[string]int{WebhookReview: 5, WebhookTransitioned: 4, WebhookHandled: 3, WebhookUnchanged: 2,
	WebhookUnmatched: 1, WebhookDuplicate: 0}

// mergeOutcome is the more telling of two events' outcomes.
func mergeOutcome(a, b string) string {
	if outcomeWeight[b] > outcomeWeight[a] {
		return b
	}
	return a
}

// processWebhookEvent deduplicates one verified event, processes it and
// records it as seen.
func (s *Server) processWebhookEvent(ctx context.Context, name string, ev providers.WebhookEvent) (string, error) {
	key := webhookEventKey(ev.ID)
	var seen bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM webhook_events WHERE provider = $1 AND event_id = $2)`,
		name, key).Scan(&seen); err != nil {
		return "", err
	}
	if seen {
		return WebhookDuplicate, nil
	}
	outcome, err := s.handleProviderEvent(ctx, name, ev)
	if err != nil {
		return "", err
	}
	if _, err := s.pool.Exec(context.WithoutCancel(ctx), `INSERT INTO webhook_events
		(provider, event_id, type, operation, reference, state, outcome, received_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING`,
		name, key, ev.Type, string(ev.Operation), ev.Reference, string(ev.State), outcome, s.clock.Now()); err != nil {
		// Processing is idempotent; a redelivery will only do it again.
		s.log.ErrorContext(ctx, "api: record webhook event", "provider", name, "event_id", ev.ID, "error", err)
	}
	s.log.InfoContext(ctx, "api: webhook", "provider", name, "event_id", ev.ID, "type", ev.Type,
		"reference", ev.Reference, "state", ev.State, "outcome", outcome)
	return outcome, nil
}

// webhookEventKey is the event id webhook_events keeps: the provider's
// own when it is text of at most 255 bytes PostgreSQL stores, else
// "sha256:" and its hash. A verified event with a longer id was processed
// on every delivery and never recorded (the column's CHECK refused it):
// each redelivery did it all again and logged an error.
func webhookEventKey(id string) string {
	if len(id) <= 255 && pgtext.Valid(id) {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// sentByProviderIDSQL finds the operation saldo sent (direction out) that
// the provider's id names. The provider id is unique per provider once an
// attempt holds it (attempts_provider_id).
const sentByProviderIDSQL = `SELECT reference FROM attempts
	WHERE provider = $1 AND provider_id = $2 AND direction = 'out'`

func (s *Server) handleProviderEvent(ctx context.Context, provider string, ev providers.WebhookEvent) (string, error) {
	if ev.Reference == "" && ev.ProviderID != "" {
		// The provider names one of the operations saldo sent by its own
		// id only (Pix: the return of a send, which the BCB's shape names
		// by the send's endToEndId, with no idEnvio). Only an operation
		// saldo sent is matched: what saldo receives (a charge) always
		// carries our reference. Then it is applied by reference as any
		// event, with the same checks (provider, amount, currency).
		var ref string
		err := s.pool.QueryRow(ctx, sentByProviderIDSQL, provider, ev.ProviderID).Scan(&ref)
		if errors.Is(err, pgx.ErrNoRows) {
			s.log.WarnContext(ctx, "api: webhook for an unknown provider id", "provider", provider, "event_id", ev.ID,
				"provider_id", ev.ProviderID)
			return WebhookUnmatched, nil
		}
		if err != nil {
			return "", err
		}
		ev.Reference = ref
	}
	for _, h := range s.cfg.WebhookHandlers {
		handled, err := h(ctx, provider, ev)
		if errors.Is(err, charges.ErrEventMismatch) {
			// Logged by charges; resending will not make it agree. A human
			// looks at it (reconciliation reports the divergence).
			s.log.ErrorContext(ctx, "api: webhook contradicts the charge", "provider", provider, "event_id", ev.ID,
				"reference", ev.Reference, "error", err)
			return WebhookReview, nil
		}
		if err != nil {
			return "", err
		}
		if handled {
			return WebhookHandled, nil
		}
	}
	// The event moves the attempt only if it comes from the attempt's
	// provider and names its operation, amount and currency (checked by
	// the attempts core; a mismatch goes to review with an alert, issue 13
	// finding 4).
	res, err := s.att.ResolveByReference(ctx, attempts.ResolveInput{Reference: ev.Reference, Provider: provider,
		Operation: ev.Operation, Direction: ev.Direction, Amount: ev.Amount, Currency: ev.Currency, State: ev.State,
		ProviderID: ev.ProviderID, FailureCode: ev.FailureCode, FailureReason: ev.FailureReason, Data: ev.Data,
		ExpectedBy: ev.ExpectedBy, Source: attempts.SourceWebhook, Actor: ev.ID, Reason: fmt.Sprintf("webhook %s (%s) reports %s", ev.ID, ev.Type, ev.State)})
	switch {
	case errors.Is(err, attempts.ErrNotFound):
		s.log.WarnContext(ctx, "api: webhook for an unknown reference", "provider", provider, "event_id", ev.ID, "reference", ev.Reference)
		return WebhookUnmatched, nil
	case errors.Is(err, attempts.ErrReportMismatch):
		s.log.ErrorContext(ctx, "api: webhook contradicts the attempt (provider, operation, amount or currency); flagged for review",
			"provider", provider, "event_id", ev.ID, "reference", ev.Reference, "attempt_id", res.Attempt.ID, "error", err)
		return WebhookReview, nil
	case errors.Is(err, attempts.ErrProviderIDMismatch):
		s.log.ErrorContext(ctx, "api: webhook provider id contradicts the attempt; flagged for review", "provider", provider,
			"event_id", ev.ID, "reference", ev.Reference, "attempt_id", res.Attempt.ID)
		return WebhookReview, nil
	case err != nil:
		return "", err
	case res.Transitioned:
		return WebhookTransitioned, nil
	}
	return WebhookUnchanged, nil
}

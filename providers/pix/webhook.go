package pix

import (
	"cmp"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/saldo/saldo/providers"
)

// WebhookSecretHeader is where ParseWebhook (which sees no URL) reads the
// secret, for a proxy that moves the ?hmac= query parameter into a header.
// saldo's own route passes the request to ParseWebhookRequest instead.
const WebhookSecretHeader = "Pix-Webhook-Secret"

// WebhookSecretParam is the query parameter of the registered webhook URL
// that carries the secret.
const WebhookSecretParam = "hmac"

// ParseWebhookRequest verifies and parses a webhook POST: the secret from
// the URL's ?hmac= (the PSP appends "/pix" to the registered URL, so a URL
// that ends with the secret arrives as "secret/pix": that suffix is
// ignored), then every event in the body. Mutual TLS, the standard's own
// protection of this callback, is terminated by the proxy in front of
// saldo.
func (p *Provider) ParseWebhookRequest(r *http.Request, body []byte, now time.Time) ([]providers.WebhookEvent, error) {
	return p.ParseWebhookEvents(r.URL.Query().Get(WebhookSecretParam), body, now)
}

// ParseWebhook implements providers.Provider for a body with exactly one
// event, the secret in WebhookSecretHeader. A PSP may group several Pix in
// one POST: use ParseWebhookRequest.
func (p *Provider) ParseWebhook(header http.Header, body []byte, now time.Time) (providers.WebhookEvent, error) {
	evs, err := p.ParseWebhookEvents(header.Get(WebhookSecretHeader), body, now)
	if err != nil {
		return providers.WebhookEvent{}, err
	}
	if len(evs) != 1 {
		return providers.WebhookEvent{}, fmt.Errorf("%w: the body carries %d events saldo can use; ParseWebhookRequest reads them all",
			providers.ErrMalformedWebhook, len(evs))
	}
	return evs[0], nil
}

// ParseWebhookEvents checks secret against the configured webhook secret in
// constant time, then reads {"pix": [...]}:
//
//   - an item the SendAPI recognises (Efí: gnExtras.idEnvio) is a send:
//     reference idEnvio, provider id its endToEndId, state by its status;
//   - an item with a txid is a Pix received for a cob: pix_charge
//     succeeded, reference txid, provider id endToEndId, amount valor;
//   - every devolucao inside an item is a refund: reference its id,
//     provider id its rtrId, state by its status;
//   - a devolucao DEVOLVIDO inside a send item, or inside an item without
//     a txid (the BCB's shape: a Pix named by its endToEndId, its
//     devolucoes), is also the return of that Pix, if it is one of our
//     sends: the receiver's bank sent the money back (see returnEvent).
//
// Items that are none of these (a Pix to the key without a txid) and
// statuses saldo does not know give no event. Every event says its
// Direction: a send's (which cannot name pix_transfer or bank_payout)
// matches only an operation saldo sent, never a cob whose txid its
// idEnvio names. An item of both shapes (a send's idEnvio, status or tipo
// beside a txid) is refused.
//
// A PSP groups several Pix in one POST, so an item is refused on its own,
// never the whole notice: an item that would give an event but is not the
// PSP's word on it (a final state without a valor, which would move money
// with no amount check, R17; an endToEndId or rtrId that is not the BCB's
// shape, E or D and 31 letters or digits, which must never become a
// provider id; text PostgreSQL cannot store, WebhookEvent.Storable; an
// item that is not a JSON object of the Pix shape) gives no event, and
// the events of the other items are returned together with a
// *RefusedItemsError (errors.Is ErrMalformedWebhook) naming each refused
// item by its position in the pix array ("pix[2]", "pix[3].devolucoes[1]"). A caller that reads any error as "refuse the notice" therefore
// applies nothing, as before; saldo's webhook route applies the events and
// acknowledges the POST (see api.Server.webhook). A body that is not
// {"pix": [...]} at all is ErrMalformedWebhook with no events.
//
// Event ids name the object and its status ("pix:<e2e>:<txid>",
// "devolucao:<id>:<status>", "envio:<idEnvio>:<status>",
// "envio-devolucao:<e2e>:<rtrId>"), so a redelivery is a duplicate and a
// later status is a new event. A received Pix's id names its txid too: a
// notice repeating an endToEndId already seen for ANOTHER txid (a PSP's
// bug, or a forgery with a valid secret) is not a duplicate of the first
// and is not dropped as one; it reaches the attempts core, which sends it
// to review (another attempt holds that endToEndId: ErrProviderIDMismatch)
// and credits nothing. Amounts are reported so the attempts core checks
// them against the attempt before anything moves.
func (p *Provider) ParseWebhookEvents(secret string, body []byte, now time.Time) ([]providers.WebhookEvent, error) {
	if p.cfg.WebhookSecret == "" {
		return nil, fmt.Errorf("%w: no Pix webhook secret configured", providers.ErrBadSignature)
	}
	secret = strings.TrimSuffix(secret, "/pix")
	got, want := sha256.Sum256([]byte(secret)), sha256.Sum256([]byte(p.cfg.WebhookSecret))
	if secret == "" || subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
		return nil, providers.ErrBadSignature
	}
	var wb struct {
		Pix []json.RawMessage `json:"pix"`
	}
	if err := json.Unmarshal(body, &wb); err != nil {
		return nil, fmt.Errorf("%w: %v", providers.ErrMalformedWebhook, err)
	}
	if wb.Pix == nil {
		return nil, fmt.Errorf("%w: no pix array", providers.ErrMalformedWebhook)
	}
	var n notice
	for i, item := range wb.Pix {
		n.item(p.cfg.Send, i, item, now)
	}
	// A returned send settled (a Pix is returned only once settled): its
	// settled events go first, so that a failed status for the same send
	// in the same POST (a NAO_REALIZADO item, or its own status beside the
	// devolucao) finds it succeeded and becomes a reversal, never a
	// failure that releases the whole reserve while money left (found by
	// review).
	slices.SortStableFunc(n.events, func(x, y providers.WebhookEvent) int {
		return cmp.Compare(settledFirst(y), settledFirst(x))
	})
	if len(n.refused) > 0 {
		return n.events, &RefusedItemsError{Refused: n.refused}
	}
	return n.events, nil
}

// settledFirst is 1 for a returned send's settled event.
func settledFirst(ev providers.WebhookEvent) int {
	if ev.Type == "pix.envio.liquidado" {
		return 1
	}
	return 0
}

// RefusedItemsError names the items of a notice ParseWebhookEvents refused
// (each with its index in the pix array and why, no secret in it); the
// events it returns with it are those of the other items. It is
// ErrMalformedWebhook for errors.Is.
type RefusedItemsError struct {
	Refused []string
}

func (e *RefusedItemsError) Error() string {
	return fmt.Sprintf("%v: %d item(s) refused: %s", providers.ErrMalformedWebhook, len(e.Refused), strings.Join(e.Refused, "; "))
}

// Unwrap makes the error ErrMalformedWebhook.
func (e *RefusedItemsError) Unwrap() error { return providers.ErrMalformedWebhook }

// RefusedItems is what saldo's webhook route reads (it names no Pix type).
func (e *RefusedItemsError) RefusedItems() []string { return e.Refused }

// notice collects one notice's events and refused items.
type notice struct {
	events  []providers.WebhookEvent
	refused []string
}

// itemAt is where an item is in the notice as its sender wrote it: its
// index in the pix array, never a count of the events read so far (an
// item gives none, one or two). devolucaoAt is a devolucao inside it.
func itemAt(i int) string         { return fmt.Sprintf("pix[%d]", i) }
func devolucaoAt(i, j int) string { return fmt.Sprintf("pix[%d].devolucoes[%d]", i, j) }

// refuse names the item at (itemAt, devolucaoAt) as refused.
func (n *notice) refuse(at, what, problem string) {
	// Bounded: the problem may quote the sender's text (a parse error
	// quotes the value), and it goes into the answer and the log.
	n.refused = append(n.refused, fmt.Sprintf("%s %.60s: %.200s", at, what, problem))
}

// add appends ev unless itemProblem refuses it, or PostgreSQL could not
// store it (Storable), refusing it instead under the item's own position
// (R17): the webhook route's own Storable check, which can only count
// events, then never sees one of a Pix notice.
func (n *notice) add(at, what string, ev providers.WebhookEvent) {
	if problem := itemProblem(ev.Operation, ev.ProviderID, ev.State, ev.Amount); problem != "" {
		n.refuse(at, what, problem)
		return
	}
	if err := ev.Storable(); err != nil {
		n.refuse(at, what, err.Error())
		return
	}
	n.events = append(n.events, ev)
}

// item reads one item of the pix array.
func (n *notice) item(send SendAPI, i int, item []byte, now time.Time) {
	if s, ok := send.WebhookSend(item); ok {
		// A send of ours names no txid: saldo sends to keys and accounts,
		// never pays a QR code (whose send would carry the receiver's
		// txid). An item of both shapes is neither's word: read as a
		// send it could settle ours, read as a received Pix it could pay
		// a cob. Refused whole (R17, R9).
		var sh itemShape
		if err := json.Unmarshal(item, &sh); err != nil {
			n.refuse(itemAt(i), "envio "+s.IDEnvio, "unreadable: "+err.Error())
			return
		}
		if present(sh.TxID) {
			n.refuse(itemAt(i), "envio "+s.IDEnvio, ambiguousItem)
			return
		}
		if s.State != "" {
			r := sendRead(s)
			at := s.Liquidacao
			if at.IsZero() {
				at = now
			}
			n.add(itemAt(i), "envio "+s.IDEnvio, providers.WebhookEvent{ID: "envio:" + s.IDEnvio + ":" + s.Status, Type: "pix.envio." + s.Status,
				// No operation: pix_transfer and bank_payout both send through
				// this endpoint, and a notice need not say which. The
				// provider id is checked as an endToEndId (OpPixTransfer's
				// shape) by itemProblem, which reads "" as that too. Its
				// direction is said: it matches only an operation saldo
				// sent, never a cob whose txid the idEnvio names (R17).
				Direction: providers.DirectionOut, Reference: s.IDEnvio, ProviderID: s.EndToEndID, State: s.State,
				FailureCode: r.failureCode, FailureReason: r.failureReason, Amount: s.Valor, Currency: "BRL",
				OccurredAt: at, Data: r.data})
		}
		// A send's devolucoes are returns of our send (its Valor is the
		// send's amount; the item's endToEndId is the send's). Read on
		// their own: the rest of a send item need not be a received Pix's
		// shape.
		var ds struct {
			Devolucoes devolucoes `json:"devolucoes"`
		}
		if err := json.Unmarshal(item, &ds); err != nil {
			n.refuse(itemAt(i), "envio "+s.IDEnvio, "devolucoes unreadable: "+err.Error())
			return
		}
		for j, dv := range ds.Devolucoes {
			n.returned(devolucaoAt(i, j), s.IDEnvio, s.EndToEndID, s.Valor, dv, now)
		}
		return
	}
	var px pixRecebido
	if err := json.Unmarshal(item, &px); err != nil {
		n.refuse(itemAt(i), "item", "not a Pix object: "+err.Error())
		return
	}
	if px.EndToEndID == "" {
		return
	}
	if px.TxID != "" {
		// The BCB's received Pix has no status and no tipo; a send's
		// status (Efí: EM_PROCESSAMENTO, REALIZADO, NAO_REALIZADO) or tipo
		// SOLICITACAO beside a txid is a send's shape without its
		// idEnvio: never a cob paid (R17, R9).
		var sh itemShape
		if err := json.Unmarshal(item, &sh); err != nil {
			n.refuse(itemAt(i), "pix", "not a Pix object: "+err.Error())
			return
		}
		if sh.sendShaped() {
			n.refuse(itemAt(i), "pix "+px.EndToEndID, ambiguousItem)
			return
		}
	}
	if (px.TxID != "" || len(px.Devolucoes) > 0) && !e2eRe.MatchString(px.EndToEndID) {
		n.refuse(itemAt(i), "pix", fmt.Sprintf("endToEndId %.40q is not the BCB's shape", px.EndToEndID))
		return
	}
	if px.TxID != "" {
		d, _ := json.Marshal(CobData{TxID: px.TxID, Status: CobConcluida, PaidAt: px.Horario.UTC(), EndToEndID: px.EndToEndID})
		n.add(itemAt(i), "pix "+px.EndToEndID, providers.WebhookEvent{ID: "pix:" + px.EndToEndID + ":" + px.TxID, Type: "pix.recebido",
			Operation: providers.OpPixCharge, Direction: providers.DirectionIn, Reference: px.TxID, ProviderID: px.EndToEndID,
			State: providers.StateSucceeded, Amount: px.Valor, Currency: "BRL", OccurredAt: px.Horario, Data: d})
	}
	for j, dv := range px.Devolucoes {
		r := devolucaoRead(dv, px.EndToEndID)
		if r.ok && dv.ID != "" {
			at := now
			if dv.Horario.Liquidacao != nil {
				at = *dv.Horario.Liquidacao
			}
			n.add(devolucaoAt(i, j), "devolucao "+dv.ID, providers.WebhookEvent{ID: "devolucao:" + dv.ID + ":" + dv.Status, Type: "pix.devolucao." + dv.Status,
				Operation: providers.OpRefund, Direction: providers.DirectionOut, Reference: dv.ID, ProviderID: dv.RtrID, State: r.state,
				FailureCode: r.failureCode, FailureReason: r.failureReason, Amount: dv.Valor, Currency: "BRL",
				OccurredAt: at, Data: r.data})
		}
		if px.TxID == "" {
			// No txid: not a Pix received for a cob of ours, so possibly a
			// Pix we sent, whose receiver returned it. Named by its
			// endToEndId only (no idEnvio): the webhook route matches it
			// to the send holding that provider id, if any.
			n.returned(devolucaoAt(i, j), "", px.EndToEndID, px.Valor, dv, now)
		}
	}
}

// ambiguousItem is why an item of both shapes is refused.
const ambiguousItem = "a send's shape (idEnvio, or a send's status or tipo) naming a txid is both a send and a received Pix: " +
	"neither is applied (saldo's sends pay no QR code)"

// itemShape is what tells an item of a send from one of a received Pix
// beside their own fields: a send names no txid, a received Pix has no
// status or tipo (the BCB's Pix object). Raw, so that any JSON reads.
type itemShape struct {
	TxID   json.RawMessage `json:"txid"`
	Status json.RawMessage `json:"status"`
	Tipo   json.RawMessage `json:"tipo"`
}

// sendShaped reports a send's status or tipo.
func (sh itemShape) sendShaped() bool {
	for _, v := range []string{EnvioEmProcessamento, EnvioRealizado, EnvioNaoRealizado} {
		if rawIs(sh.Status, v) {
			return true
		}
	}
	return rawIs(sh.Tipo, "SOLICITACAO")
}

// rawIs reports whether the JSON value r is the string v (any case).
func rawIs(r json.RawMessage, v string) bool {
	var s string
	return json.Unmarshal(r, &s) == nil && strings.EqualFold(strings.TrimSpace(s), v)
}

// present reports a JSON value other than null and "".
func present(r json.RawMessage) bool {
	t := strings.TrimSpace(string(r))
	return t != "" && t != "null" && t != `""`
}

// FailureDevolvido is the failure code of a send the receiver's bank
// returned (a devolucao DEVOLVIDO of our Pix).
const FailureDevolvido = "devolvido"

// ReturnData is the Data of a returned send's event.
type ReturnData struct {
	IDEnvio    string    `json:"id_envio,omitempty"`
	EndToEndID string    `json:"end_to_end_id"`
	ID         string    `json:"devolucao_id,omitempty"`
	RtrID      string    `json:"rtr_id"`
	Valor      string    `json:"valor"`
	Status     string    `json:"status"`
	Motivo     string    `json:"motivo,omitempty"`
	SettledAt  time.Time `json:"settled_at,omitzero"`
}

// returned adds the events of a devolucao DEVOLVIDO of a Pix we sent: the
// receiver's bank sent (part of) the money back after the send was
// REALIZADO. They report the send succeeded (a Pix is returned only once
// settled), then failed, both with the send's amount (sendValor, what the
// attempts core checks against the attempt) and endToEndId, under the
// send's idEnvio (reference; "" when the item does not give it: then the
// webhook route matches the send by its endToEndId among the operations
// saldo sent). For a send that succeeded the failure is a divergence of
// kind reversal (R9, R19): review, needs_attention, payout.diverged; the
// ledger is not moved, a human books the return (the returned valor, which
// may be part of the send, is in the event's Data and failure reason).
// Other statuses give nothing: money comes back only when DEVOLVIDO. The
// ids name the endToEndId (and the return's rtrId), so the same return
// notified in either shape is one event. pos is where the devolucao is in
// the notice (devolucaoAt), for a refusal.
func (n *notice) returned(pos, idEnvio, e2e, sendValor string, dv devolucao, now time.Time) {
	if dv.Status != DevolucaoDevolvido {
		return
	}
	what := "devolucao of " + e2e
	switch {
	case dv.RtrID == "":
		n.refuse(pos, what, "a devolucao DEVOLVIDO without an rtrId")
		return
	case !wellShaped(providers.OpRefund, dv.RtrID):
		n.refuse(pos, what, fmt.Sprintf("rtrId %.40q is not the BCB's shape", dv.RtrID))
		return
	case blank(dv.Valor):
		n.refuse(pos, what, "a devolucao DEVOLVIDO without a valor is not the provider's word on the amount (R17)")
		return
	case e2e == "":
		n.refuse(pos, what, "a returned send without its endToEndId")
		return
	}
	at := now
	if dv.Horario.Liquidacao != nil {
		at = *dv.Horario.Liquidacao
	}
	rd := ReturnData{IDEnvio: idEnvio, EndToEndID: e2e, ID: dv.ID, RtrID: dv.RtrID, Valor: dv.Valor, Status: dv.Status,
		Motivo: dv.Motivo, SettledAt: at.UTC()}
	data, _ := json.Marshal(rd)
	// A Pix is returned only once it was settled: the send was REALIZADO.
	// Said first, so that an attempt still open (the REALIZADO notice
	// lost or not yet come) settles, and the return is then a reversal on
	// it. Reported failed on an open attempt, a return (maybe of part of
	// the send) would release the whole reserve while money left.
	// Each return's settled event has an id of its own (the rtrId): one
	// recorded while the send was unknown to saldo (no endToEndId yet,
	// unmatched) must not make a later return's settled event a
	// duplicate, leaving its failed event alone to fail an open send
	// (found by review).
	sd, _ := json.Marshal(SendData{IDEnvio: idEnvio, EndToEndID: e2e, Status: EnvioRealizado})
	settled := providers.WebhookEvent{ID: "envio-liquidado:" + e2e + ":" + dv.RtrID, Type: "pix.envio.liquidado",
		Direction: providers.DirectionOut, Reference: idEnvio, ProviderID: e2e, State: providers.StateSucceeded, Amount: sendValor, Currency: "BRL",
		OccurredAt: at, Data: sd}
	reason := fmt.Sprintf("returned by the receiver: devolucao rtrId %s of %.40s DEVOLVIDO (the send was %.40s)", dv.RtrID, dv.Valor, sendValor)
	returned := providers.WebhookEvent{ID: "envio-devolucao:" + e2e + ":" + dv.RtrID, Type: "pix.envio.devolvido",
		Direction: providers.DirectionOut, Reference: idEnvio, ProviderID: e2e, State: providers.StateFailed, FailureCode: FailureDevolvido,
		FailureReason: reason, Amount: sendValor, Currency: "BRL", OccurredAt: at, Data: data}
	// Both or neither: the settled event applied alone would settle the
	// send and no reversal would ever say the money came back (a motivo
	// PostgreSQL cannot store refused only the second; found by review).
	for _, ev := range []providers.WebhookEvent{settled, returned} {
		if err := ev.Storable(); err != nil {
			n.refuse(pos, what, err.Error())
			return
		}
	}
	n.add(pos, what, settled)
	n.add(pos, what, returned)
}

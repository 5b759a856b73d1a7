package pix

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
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
//     provider id its rtrId, state by its status.
//
// Items that are none of these (a Pix to the key without a txid) and
// statuses saldo does not know give no event. An item that would give an
// event but is not the PSP's word on it refuses the whole notice
// (ErrMalformedWebhook, the PSP's own redelivery or a lookup settles it):
// a final state (a received Pix, REALIZADO, DEVOLVIDO, NAO_REALIZADO...)
// without a valor, which would move money with no amount check (R17), or
// an endToEndId or rtrId that is not the BCB's shape (E or D and 31
// letters or digits). Event ids name the object
// and its status ("pix:<e2e>", "devolucao:<id>:<status>",
// "envio:<idEnvio>:<status>"), so a redelivery is a duplicate and a later
// status is a new event. Amounts are reported so the attempts core checks
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
	var out []providers.WebhookEvent
	for _, item := range wb.Pix {
		if s, ok := p.cfg.Send.WebhookSend(item); ok {
			if s.State == "" {
				continue
			}
			if err := checkItem("envio "+s.IDEnvio, providers.OpPixTransfer, s.EndToEndID, s.State, s.Valor); err != nil {
				return nil, err
			}
			r := sendRead(s)
			at := s.Liquidacao
			if at.IsZero() {
				at = now
			}
			out = append(out, providers.WebhookEvent{ID: "envio:" + s.IDEnvio + ":" + s.Status, Type: "pix.envio." + s.Status,
				// No operation: pix_transfer and bank_payout both send through
				// this endpoint, and a notice need not say which.
				Reference: s.IDEnvio, ProviderID: s.EndToEndID, State: s.State,
				FailureCode: r.failureCode, FailureReason: r.failureReason, Amount: s.Valor, Currency: "BRL",
				OccurredAt: at, Data: r.data})
			continue
		}
		var px pixRecebido
		if err := json.Unmarshal(item, &px); err != nil {
			return nil, fmt.Errorf("%w: pix item: %v", providers.ErrMalformedWebhook, err)
		}
		if px.EndToEndID == "" {
			continue
		}
		if (px.TxID != "" || len(px.Devolucoes) > 0) && !e2eRe.MatchString(px.EndToEndID) {
			return nil, fmt.Errorf("%w: pix item: endToEndId %.40q is not the BCB's shape", providers.ErrMalformedWebhook, px.EndToEndID)
		}
		if px.TxID != "" {
			if err := checkItem("pix "+px.EndToEndID, providers.OpPixCharge, px.EndToEndID, providers.StateSucceeded, px.Valor); err != nil {
				return nil, err
			}
			d, _ := json.Marshal(CobData{TxID: px.TxID, Status: CobConcluida, PaidAt: px.Horario.UTC(), EndToEndID: px.EndToEndID})
			out = append(out, providers.WebhookEvent{ID: "pix:" + px.EndToEndID, Type: "pix.recebido",
				Operation: providers.OpPixCharge, Reference: px.TxID, ProviderID: px.EndToEndID,
				State: providers.StateSucceeded, Amount: px.Valor, Currency: "BRL", OccurredAt: px.Horario, Data: d})
		}
		for _, dv := range px.Devolucoes {
			r := devolucaoRead(dv, px.EndToEndID)
			if !r.ok || dv.ID == "" {
				continue
			}
			if err := checkItem("devolucao "+dv.ID, providers.OpRefund, dv.RtrID, r.state, dv.Valor); err != nil {
				return nil, err
			}
			at := now
			if dv.Horario.Liquidacao != nil {
				at = *dv.Horario.Liquidacao
			}
			out = append(out, providers.WebhookEvent{ID: "devolucao:" + dv.ID + ":" + dv.Status, Type: "pix.devolucao." + dv.Status,
				Operation: providers.OpRefund, Reference: dv.ID, ProviderID: dv.RtrID, State: r.state,
				FailureCode: r.failureCode, FailureReason: r.failureReason, Amount: dv.Valor, Currency: "BRL",
				OccurredAt: at, Data: r.data})
		}
	}
	return out, nil
}

// checkItem refuses an item whose provider id is not the BCB's shape, or
// whose final state comes without a valor (R17: not the provider's word on
// the amount).
func checkItem(what string, op providers.Operation, providerID string, state providers.State, valor string) error {
	if problem := itemProblem(op, providerID, state, valor); problem != "" {
		return fmt.Errorf("%w: %.60s: %s", providers.ErrMalformedWebhook, what, problem)
	}
	return nil
}

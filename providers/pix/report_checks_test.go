package pix_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/pix/pixtest"
)

const (
	goodE2E = "E12345678202009091221kkkkkkkkkkk"
	goodRtr = "D12345678202009091221abcdf098765"
)

// A lookup is the provider's word on an operation only when it names it
// whole. For a cob: CONCLUIDA with the Pix that paid it (its endToEndId is
// the charge's provider id, which refunds need, R9) is succeeded; without
// one it is processing. The amount is the Pix's valor, else valor.original
// (R17: an empty valor never replaces a readable one); a final state
// without any valor, or an endToEndId not of the BCB's shape, is
// inconclusive (Exchange.Err, R16).
func TestPixCobLookupNeedsItsPixAndAValor_R16_R17(t *testing.T) {
	e := newEnv(t, pixtest.Options{})
	now := time.Now().UTC().Format(time.RFC3339Nano)
	cob := func(txid, original, pix string) string {
		return `{"calendario":{"criacao":"` + now + `","expiracao":3600},"txid":"` + txid + `","revisao":0,"status":"CONCLUIDA",` +
			`"valor":{"original":"` + original + `"},"chave":"` + receivingKey + `"` + pix + `}`
	}
	paidBy := func(txid, e2e, valor string) string {
		return `,"pix":[{"endToEndId":"` + e2e + `","txid":"` + txid + `","valor":"` + valor + `","horario":"` + now + `"}]`
	}
	for _, c := range []struct {
		name                 string
		original, e2e, valor string
		noPix                bool
		found                bool
		state                providers.State
		providerID, amount   string
	}{
		{name: "paid", original: "30.00", e2e: goodE2E, valor: "30.00", found: true, state: providers.StateSucceeded, providerID: goodE2E, amount: "30.00"},
		{name: "no pix array", original: "30.00", noPix: true, found: true, state: providers.StateProcessing, amount: "30.00"},
		{name: "pix without endToEndId", original: "30.00", valor: "30.00", found: true, state: providers.StateProcessing, amount: "30.00"},
		{name: "pix without valor", original: "30.00", e2e: goodE2E, found: true, state: providers.StateSucceeded, providerID: goodE2E, amount: "30.00"},
		{name: "no valor at all", e2e: goodE2E},
		{name: "endToEndId too long", original: "30.00", e2e: goodE2E + "x", valor: "30.00"},
		{name: "endToEndId of kilobytes", original: "30.00", e2e: "E" + strings.Repeat("7", 4000), valor: "30.00"},
		{name: "endToEndId not E", original: "30.00", e2e: "X" + goodE2E[1:], valor: "30.00"},
	} {
		r := ref(t)
		pix := ""
		if !c.noPix {
			pix = paidBy(r, c.e2e, c.valor)
		}
		e.srv.FailNext(http.StatusOK, cob(r, c.original, pix))
		lr := e.lookup(providers.OpPixCharge, r)
		if !c.found {
			if lr.Found || lr.Exchange.Err == nil {
				t.Errorf("%s: found %v err %v state %s provider id %.40q amount %q, want an inconclusive lookup", c.name,
					lr.Found, lr.Exchange.Err, lr.State, lr.ProviderID, lr.Amount)
			}
			continue
		}
		if !lr.Found || lr.Exchange.Err != nil || lr.State != c.state || lr.ProviderID != c.providerID || lr.Amount != c.amount {
			t.Errorf("%s: found %v err %v state %s provider id %q amount %q; want %s %q %q", c.name, lr.Found, lr.Exchange.Err,
				lr.State, lr.ProviderID, lr.Amount, c.state, c.providerID, c.amount)
		}
	}
}

// R17 for notices: an item of a final state without a valor, or whose
// endToEndId or rtrId is not the BCB's shape, is refused (ErrMalformedWebhook,
// no event of it); a send still processing may come without a valor.
func TestPixNoticeItemsNeedAValorAndBCBShapedIDs_R17(t *testing.T) {
	e := newEnv(t, pixtest.Options{})
	const txid = "971122d8f37211eaadc10242ac120002"
	const idEnvio = "0123456789abcdef0123456789abcdef"
	send := func(e2e, valor, status string) string {
		return `{"pix":[{"endToEndId":"` + e2e + `",` + valor + `"horario":"2020-09-09T20:15:00Z","status":"` + status +
			`","tipo":"SOLICITACAO","gnExtras":{"idEnvio":"` + idEnvio + `"}}]}`
	}
	refund := func(rtr, valor, status string) string {
		return `{"pix":[{"endToEndId":"` + goodE2E + `","txid":"` + txid + `","valor":"50.00","horario":"2020-09-09T20:15:00Z",` +
			`"devolucoes":[{"id":"r1","rtrId":"` + rtr + `",` + valor + `"horario":{"solicitacao":"2020-09-09T20:16:00Z"},"status":"` + status + `"}]}]}`
	}
	for name, body := range map[string]string{
		"received Pix without valor":    `{"pix":[{"endToEndId":"` + goodE2E + `","txid":"` + txid + `","horario":"2020-09-09T20:15:00Z"}]}`,
		"received Pix with blank valor": `{"pix":[{"endToEndId":"` + goodE2E + `","txid":"` + txid + `","valor":" ","horario":"2020-09-09T20:15:00Z"}]}`,
		"received Pix, long endToEndId": `{"pix":[{"endToEndId":"` + goodE2E + strings.Repeat("a", 4000) + `","txid":"` + txid +
			`","valor":"50.00","horario":"2020-09-09T20:15:00Z"}]}`,
		"send REALIZADO without valor":      send(goodE2E, "", "REALIZADO"),
		"send NAO_REALIZADO without valor":  send(goodE2E, "", "NAO_REALIZADO"),
		"send, endToEndId not E":            send("X"+goodE2E[1:], `"valor":"1.00",`, "REALIZADO"),
		"devolucao DEVOLVIDO without valor": refund(goodRtr, "", "DEVOLVIDO"),
		"devolucao, rtrId not D":            refund("E"+goodRtr[1:], `"valor":"5.00",`, "DEVOLVIDO"),
		"devolucao, rtrId too long":         refund(goodRtr+"0", `"valor":"5.00",`, "EM_PROCESSAMENTO"),
	} {
		evs, err := post2(e, body)
		if !errors.Is(err, providers.ErrMalformedWebhook) {
			t.Errorf("%s: %d events, error %v; want ErrMalformedWebhook", name, len(evs), err)
		}
		// The refused item gives no event; the item's other events (the
		// received Pix a devolucao sits in) are the PSP's word and stay.
		for _, ev := range evs {
			if !strings.HasPrefix(name, "devolucao") || ev.Operation == providers.OpRefund {
				t.Errorf("%s: refused, yet event %s (provider id %.40q)", name, ev.ID, ev.ProviderID)
			}
		}
	}
	for name, body := range map[string]string{
		"send EM_PROCESSAMENTO without valor": send(goodE2E, "", "EM_PROCESSAMENTO"),
		"send REALIZADO":                      send(goodE2E, `"valor":"1.00",`, "REALIZADO"),
		"devolucao DEVOLVIDO":                 refund(goodRtr, `"valor":"5.00",`, "DEVOLVIDO"),
	} {
		if evs, err := post2(e, body); err != nil || len(evs) == 0 {
			t.Errorf("%s: %d events, error %v; want its events", name, len(evs), err)
		}
	}
}

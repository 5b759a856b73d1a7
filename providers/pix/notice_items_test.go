package pix_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/pix"
	"github.com/saldo/saldo/providers/pix/pixtest"
)

// R17: a PSP groups several Pix in one POST. One item that is not the PSP's
// word (an endToEndId not of the BCB's shape, a final state without a
// valor, an item that is not a Pix object) is refused on its own: the
// events of the good items come back with a *RefusedItemsError
// (ErrMalformedWebhook for errors.Is) naming each refused item, and no
// event carries a refused item's id. Before, the first bad item refused
// the whole notice and the good ones waited for lookups.
func TestPixNoticeRefusesABadItemAloneAndKeepsTheOthers_R17(t *testing.T) {
	e := newEnv(t, pixtest.Options{})
	const badE2E = "E12345678202009091221kkkkkkkkkk-"
	body := `{"pix":[
	 {"endToEndId":"` + goodE2E + `","txid":"971122d8f37211eaadc10242ac120002","valor":"50.00","horario":"2020-09-09T20:15:00Z"},
	 {"endToEndId":"` + badE2E + `","txid":"c3e0e7a4e7f1469a9f782d3d4999343c","valor":"10.00","horario":"2020-09-09T20:15:00Z"},
	 {"endToEndId":"E09089356202011251226APIff82f2e5","horario":"2021-11-25T12:26:43Z","status":"REALIZADO","tipo":"SOLICITACAO",
	  "gnExtras":{"idEnvio":"0123456789abcdef0123456789abcdef"}},
	 "not an object",
	 {"endToEndId":"E09089356202011251226APIaa82f2e6","valor":"3.00","horario":"2021-11-25T12:26:43Z","status":"REALIZADO",
	  "tipo":"SOLICITACAO","gnExtras":{"idEnvio":"fedcba9876543210fedcba9876543210"}}
	]}`
	evs, err := post2(e, body)
	if !errors.Is(err, providers.ErrMalformedWebhook) {
		t.Fatalf("error %v, want ErrMalformedWebhook", err)
	}
	var ri *pix.RefusedItemsError
	if !errors.As(err, &ri) || len(ri.RefusedItems()) != 3 {
		t.Fatalf("error %v, want a RefusedItemsError naming 3 items", err)
	}
	for i, want := range []string{"pix[1]", "pix[2]", "pix[3]"} {
		if !strings.HasPrefix(ri.Refused[i], want) {
			t.Errorf("refused %d: %q, want it to name %s", i, ri.Refused[i], want)
		}
	}
	if len(evs) != 2 || evs[0].ID != "pix:"+goodE2E+":971122d8f37211eaadc10242ac120002" ||
		evs[1].ID != "envio:fedcba9876543210fedcba9876543210:REALIZADO" {
		t.Fatalf("events %+v, want the received Pix and the second send", evs)
	}
	for _, ev := range evs {
		if ev.ProviderID == badE2E || ev.Reference == "c3e0e7a4e7f1469a9f782d3d4999343c" || ev.Reference == "0123456789abcdef0123456789abcdef" {
			t.Errorf("event %s comes from a refused item", ev.ID)
		}
	}

	// ParseWebhook (one event) still refuses such a notice whole.
	if _, err := e.p.ParseWebhook(map[string][]string{pix.WebhookSecretHeader: {hookSecret}}, []byte(body), time.Now()); !errors.Is(err, providers.ErrMalformedWebhook) {
		t.Errorf("ParseWebhook: %v", err)
	}
}

// R9, R19: a devolucao DEVOLVIDO of a Pix we sent (the receiver's bank
// returned it) gives, per return, the send's settlement (a Pix is returned
// only once settled) and then its failure, with the send's amount, under
// the send's endToEndId: in Efí's send item (gnExtras.idEnvio, reference
// idEnvio) or in the BCB's shape (an item without txid: no reference, the
// webhook route matches the send by its endToEndId). Statuses other than
// DEVOLVIDO give nothing; a return without an rtrId or a valor is refused.
// Before, a send's devolucoes were ignored.
func TestPixNoticeOfAReturnedSendReportsItFailed_R9_R19(t *testing.T) {
	e := newEnv(t, pixtest.Options{})
	const sendE2E = "E09089356202011251226APIff82f2e5"
	const idEnvio = "0123456789abcdef0123456789abcdef"
	dev := func(rtr, valor, status string) string {
		return `{"id":"x` + status[:3] + `","rtrId":"` + rtr + `","valor":"` + valor + `","horario":{"solicitacao":"2021-11-26T10:00:00Z",` +
			`"liquidacao":"2021-11-26T10:00:01Z"},"status":"` + status + `"}`
	}
	for name, c := range map[string]struct {
		body, ref string
		want      []string
	}{
		"BCB shape": {body: `{"pix":[{"endToEndId":"` + sendE2E + `","valor":"4.00","horario":"2021-11-25T12:26:43Z","devolucoes":[` +
			dev(goodRtr, "2.00", "DEVOLVIDO") + `,` + dev("D12345678202009091221abcdf098766", "2.00", "EM_PROCESSAMENTO") + `]}]}`,
			// A return's settled event first in the POST (a return proves the
			// send settled), named by the return's rtrId too.
			want: []string{"envio-liquidado:" + sendE2E + ":" + goodRtr, "devolucao:xDEV:DEVOLVIDO",
				"envio-devolucao:" + sendE2E + ":" + goodRtr, "devolucao:xEM_:EM_PROCESSAMENTO"}},
		"Efí send item": {body: `{"pix":[{"endToEndId":"` + sendE2E + `","valor":"4.00","horario":"2021-11-25T12:26:43Z","status":"REALIZADO",` +
			`"tipo":"SOLICITACAO","gnExtras":{"idEnvio":"` + idEnvio + `"},"devolucoes":[` + dev(goodRtr, "4.00", "DEVOLVIDO") + `]}]}`,
			ref: idEnvio, want: []string{"envio-liquidado:" + sendE2E + ":" + goodRtr, "envio:" + idEnvio + ":REALIZADO",
				"envio-devolucao:" + sendE2E + ":" + goodRtr}},
	} {
		evs, err := post2(e, c.body)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var ids []string
		for _, ev := range evs {
			ids = append(ids, ev.ID)
			switch {
			case strings.HasPrefix(ev.ID, "envio-liquidado:"):
				if ev.State != providers.StateSucceeded || ev.ProviderID != sendE2E || ev.Amount != "4.00" || ev.Reference != c.ref || ev.Operation != "" {
					t.Errorf("%s: settlement %+v", name, ev)
				}
			case strings.HasPrefix(ev.ID, "envio-devolucao:"):
				if ev.State != providers.StateFailed || ev.ProviderID != sendE2E || ev.Amount != "4.00" || ev.Reference != c.ref ||
					ev.FailureCode != pix.FailureDevolvido || ev.Operation != "" || !strings.Contains(ev.FailureReason, goodRtr) {
					t.Errorf("%s: return %+v", name, ev)
				}
			}
		}
		if strings.Join(ids, ",") != strings.Join(c.want, ",") {
			t.Errorf("%s: events %v, want %v", name, ids, c.want)
		}
	}

	// A return without an rtrId, or without a valor, is refused alone.
	for name, d := range map[string]string{"no rtrId": dev("", "2.00", "DEVOLVIDO"), "no valor": dev(goodRtr, "", "DEVOLVIDO"),
		"rtrId not D": dev("E"+goodRtr[1:], "2.00", "DEVOLVIDO")} {
		body := `{"pix":[{"endToEndId":"` + sendE2E + `","valor":"4.00","horario":"2021-11-25T12:26:43Z","status":"REALIZADO",` +
			`"tipo":"SOLICITACAO","gnExtras":{"idEnvio":"` + idEnvio + `"},"devolucoes":[` + d + `]}]}`
		evs, err := post2(e, body)
		if !errors.Is(err, providers.ErrMalformedWebhook) {
			t.Errorf("%s: %v, want the return refused", name, err)
		}
		if len(evs) != 1 || evs[0].ID != "envio:"+idEnvio+":REALIZADO" {
			t.Errorf("%s: events %+v, want the send's own notice only", name, evs)
		}
	}
}

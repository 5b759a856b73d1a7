package pix_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/pix"
	"github.com/saldo/saldo/providers/pix/pixtest"
)

// The body a PSP POSTs: a received Pix for a cob (with a devolucao given
// as one object, as the BCB description's own pixWebhook1 example has
// it), a received Pix with an array of devolucoes, a Pix to the key
// without a txid (not ours), and an Efí send notice.
const hookBody = `{"pix":[
 {"endToEndId":"E12345678202009091221kkkkkkkkkkk","txid":"c3e0e7a4e7f1469a9f782d3d4999343c","valor":"110.00",
  "horario":"2020-09-09T20:15:00.358Z","infoPagador":"0123456789",
  "devolucoes":{"id":"123ABC","rtrId":"D12345678202009091221abcdf098765","valor":"10.00",
   "horario":{"solicitacao":"2020-09-09T20:15:00.358Z"},"status":"EM_PROCESSAMENTO"}},
 {"endToEndId":"E87654321202009091221dfghi123456","txid":"971122d8f37211eaadc10242ac120002","valor":"50.00",
  "horario":"2020-09-09T20:15:00.358Z",
  "devolucoes":[{"id":"r1","rtrId":"D87654321202009091221dfghi123450","valor":"5.00",
   "horario":{"solicitacao":"2020-09-09T20:16:00Z","liquidacao":"2020-09-09T20:16:01Z"},"status":"DEVOLVIDO"},
   {"id":"r2","rtrId":"D87654321202009091221dfghi123451","valor":"6.00","horario":{"solicitacao":"2020-09-09T20:17:00Z"},
    "status":"NAO_REALIZADO","motivo":"Conta encerrada"}]},
 {"endToEndId":"E11111111202009091221aaaaaaaaaaa","valor":"1.00","horario":"2020-09-09T20:15:00Z"},
 {"endToEndId":"E09089356202011251226APIff82f2e5","valor":"12.31","horario":"2021-11-25T12:26:43.000Z",
  "status":"REALIZADO","tipo":"SOLICITACAO","chave":"19974764017","gnExtras":{"idEnvio":"0123456789abcdef0123456789abcdef"}}
]}`

func TestWebhookSecretAndEvents_R17(t *testing.T) {
	e := newEnv(t, pixtest.Options{})
	now := time.Now()
	post := func(rawQuery string) ([]providers.WebhookEvent, error) {
		r := httptest.NewRequest(http.MethodPost, "/v1/webhooks/pix?"+rawQuery, nil)
		return e.p.ParseWebhookRequest(r, []byte(hookBody), now)
	}
	for name, q := range map[string]string{
		"wrong secret":  "hmac=hook-secret-12",
		"longer secret": "hmac=" + hookSecret + "x",
		"no secret":     "",
		"empty secret":  "hmac=",
	} {
		if _, err := post(q); !errors.Is(err, providers.ErrBadSignature) {
			t.Errorf("%s: %v, want ErrBadSignature", name, err)
		}
	}
	noSecret := e.adapter(func(c *pix.Config) { c.WebhookSecret = "" })
	if _, err := noSecret.ParseWebhookRequest(httptest.NewRequest(http.MethodPost, "/x?hmac=", nil), []byte(hookBody), now); !errors.Is(err, providers.ErrBadSignature) {
		t.Errorf("no configured secret: %v", err)
	}
	// Registered as ...?hmac=<secret>&ignorar= the PSP's "/pix" lands in
	// ignorar; registered as ...?hmac=<secret> it lands on the secret.
	for _, q := range []string{"hmac=" + url.QueryEscape(hookSecret) + "&ignorar=/pix", "hmac=" + hookSecret + "/pix"} {
		evs, err := post(q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if len(evs) != 6 {
			t.Fatalf("%s: %d events: %+v", q, len(evs), evs)
		}
	}
	evs, _ := post("hmac=" + hookSecret)
	type want struct {
		id, ref, pid, amount string
		op                   providers.Operation
		state                providers.State
		code                 string
	}
	for i, w := range []want{
		{"pix:E12345678202009091221kkkkkkkkkkk:c3e0e7a4e7f1469a9f782d3d4999343c", "c3e0e7a4e7f1469a9f782d3d4999343c", "E12345678202009091221kkkkkkkkkkk", "110.00",
			providers.OpPixCharge, providers.StateSucceeded, ""},
		{"devolucao:123ABC:EM_PROCESSAMENTO", "123ABC", "D12345678202009091221abcdf098765", "10.00",
			providers.OpRefund, providers.StateProcessing, ""},
		{"pix:E87654321202009091221dfghi123456:971122d8f37211eaadc10242ac120002", "971122d8f37211eaadc10242ac120002", "E87654321202009091221dfghi123456", "50.00",
			providers.OpPixCharge, providers.StateSucceeded, ""},
		{"devolucao:r1:DEVOLVIDO", "r1", "D87654321202009091221dfghi123450", "5.00", providers.OpRefund, providers.StateSucceeded, ""},
		{"devolucao:r2:NAO_REALIZADO", "r2", "D87654321202009091221dfghi123451", "6.00", providers.OpRefund, providers.StateFailed,
			pix.FailureNaoRealizado},
		{"envio:0123456789abcdef0123456789abcdef:REALIZADO", "0123456789abcdef0123456789abcdef", "E09089356202011251226APIff82f2e5",
			"12.31", "", providers.StateSucceeded, ""},
	} {
		ev := evs[i]
		if ev.ID != w.id || ev.Reference != w.ref || ev.ProviderID != w.pid || ev.Amount != w.amount || ev.Currency != "BRL" ||
			ev.Operation != w.op || ev.State != w.state || ev.FailureCode != w.code {
			t.Errorf("event %d: %+v, want %+v", i, ev, w)
		}
	}
	if evs[4].FailureReason != "Conta encerrada" {
		t.Errorf("failure reason %q", evs[4].FailureReason)
	}

	// ParseWebhook (header secret) takes one event; several are refused.
	one := `{"pix":[{"endToEndId":"E87654321202009091221dfghi123456","txid":"971122d8f37211eaadc10242ac120002","valor":"50.00","horario":"2020-09-09T20:15:00Z"}]}`
	h := http.Header{}
	h.Set(pix.WebhookSecretHeader, hookSecret)
	if ev, err := e.p.ParseWebhook(h, []byte(one), now); err != nil || ev.Reference != "971122d8f37211eaadc10242ac120002" {
		t.Fatalf("ParseWebhook: %+v %v", ev, err)
	}
	if _, err := e.p.ParseWebhook(h, []byte(hookBody), now); !errors.Is(err, providers.ErrMalformedWebhook) {
		t.Fatalf("several events through ParseWebhook: %v", err)
	}
	h.Set(pix.WebhookSecretHeader, "nope")
	if _, err := e.p.ParseWebhook(h, []byte(one), now); !errors.Is(err, providers.ErrBadSignature) {
		t.Fatalf("bad header secret: %v", err)
	}
	for _, bad := range []string{`not json`, `{"foo":1}`, `{"pix":[{"endToEndId":1}]}`} {
		if _, err := post2(e, bad); !errors.Is(err, providers.ErrMalformedWebhook) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

func post2(e *env, body string) ([]providers.WebhookEvent, error) {
	r := httptest.NewRequest(http.MethodPost, "/v1/webhooks/pix?hmac="+hookSecret, nil)
	return e.p.ParseWebhookRequest(r, []byte(body), time.Now())
}

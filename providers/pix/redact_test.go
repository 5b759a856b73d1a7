package pix_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/pix"
	"github.com/saldo/saldo/providers/pix/pixtest"
)

// Secrets never reach storage or logs, a provider's 401/403 included. A
// PSP or gateway that quotes the credential it refused puts the OAuth2
// access token (or the client secret) in its problem's text, which the
// adapter reads into SubmitResult.FailureReason and keeps in the
// exchange's body, and which the attempts core writes as the attempt's
// last_error and its event. The adapter redacts the access token and the
// client secret from every exchange's body, headers and error (as the
// Stripe adapter redacts its key).
func TestPixRefusalQuotingTheTokenOrClientSecretIsRedacted(t *testing.T) {
	var logs bytes.Buffer
	e := newEnv(t, pixtest.Options{SendsFinal: true})
	e.p = e.adapter(func(c *pix.Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	in := providers.OperationInput{Amount: "1.00", Currency: "BRL", Destination: keyDest("a@b.c")}

	sr, out := e.submit(providers.OpPixTransfer, in, ref(t))
	wantOutcome(t, out, attempts.OutcomeSucceeded, sr)
	reqs := e.srv.Requests()
	token := strings.TrimPrefix(reqs[len(reqs)-1].Header.Get("Authorization"), "Bearer ")
	if token == "" {
		t.Fatal("no bearer token seen")
	}

	e.srv.FailNext(http.StatusForbidden, `{"nome":"acesso_negado","mensagem":"escopo insuficiente para o token `+token+
		` do cliente `+clientSecret+`"}`)
	sr, out = e.submit(providers.OpPixTransfer, in, ref(t))
	wantOutcome(t, out, attempts.OutcomeAuthRefused, sr)
	errText := ""
	if sr.Exchange.Err != nil {
		errText = sr.Exchange.Err.Error()
	}
	for what, text := range map[string]string{"FailureReason": sr.FailureReason, "FailureCode": sr.FailureCode,
		"Exchange.Body": string(sr.Exchange.Body), "Exchange.Err": errText, "adapter log": logs.String()} {
		for name, secret := range map[string]string{"OAuth2 access token": token, "client secret": clientSecret} {
			if strings.Contains(text, secret) {
				t.Errorf("the %s is in %s: %q", name, what, text)
			}
		}
	}
	if !strings.Contains(sr.FailureReason, "escopo insuficiente") {
		t.Errorf("the refusal's reason is lost: %q", sr.FailureReason)
	}
}

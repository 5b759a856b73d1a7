package pix_test

import (
	"net/http"
	"testing"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/pix/pixtest"
)

// The "id already used" answers worded exactly as the BCB
// description (github.com/bacen/pix-api, openapi.yaml v2.9, error types
// PixDevolucaoInvalida and CobOperacaoInvalida) are read as duplicate, not
// failed. The fake PSP paraphrases them ("um id já utilizado"); these are
// the description's own sentences, with its backticks and line break.
func TestBCBVerbatimDuplicateAnswersAreDuplicate_R14(t *testing.T) {
	e := newEnv(t, pixtest.Options{})
	txid := ref(t)
	e.submit(providers.OpPixCharge, cobInput(), txid)
	e2e, err := e.srv.PayCob(txid)
	if err != nil {
		t.Fatal(err)
	}
	in := providers.OperationInput{Amount: "1.00", Currency: "BRL", ChargeProviderID: e2e}

	// PUT /pix/{e2eid}/devolucao/{id}: the violation as the description
	// lists it under PixDevolucaoInvalida.
	e.srv.FailNext(http.StatusBadRequest, `{"type":"https://pix.bcb.gov.br/api/v2/error/PixDevolucaoInvalida",`+
		`"title":"Devolução inválida.","status":400,`+
		`"detail":"A presente requisição de devolução não respeita o _schema_ ou não faz sentido semanticamente.",`+
		`"violacoes":[{"razao":"A presente requisição de devolução apresenta um `+"`{id}`"+` já utilizado por outra requisição de\ndevolução para o `+"`{e2eid}`"+` em questão.","propriedade":"id"}]}`)
	sr, out := e.submit(providers.OpRefund, in, ref(t))
	wantOutcome(t, out, attempts.OutcomeInFlight, sr)

	// PUT /cob/{txid} of a cob that exists and is no longer ATIVA.
	e.srv.FailNext(http.StatusBadRequest, `{"type":"https://pix.bcb.gov.br/api/v2/error/CobOperacaoInvalida",`+
		`"title":"Cobrança inválida.","status":400,`+
		`"detail":"A requisição que busca alterar ou criar uma cobrança para pagamento imediato não respeita o _schema_ ou está semanticamente errada.",`+
		`"violacoes":[{"razao":"A cobrança já existe, não está no status ATIVA, e a presente requisição busca alterá-la.","propriedade":"txid"}]}`)
	sr, out = e.submit(providers.OpPixCharge, cobInput(), txid)
	wantOutcome(t, out, attempts.OutcomeInFlight, sr)
	if out.Status() != attempts.StatusUnknown || out.Resendable() {
		t.Fatalf("duplicate leads to %s (resendable %v)", out.Status(), out.Resendable())
	}
}

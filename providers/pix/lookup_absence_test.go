package pix_test

import (
	"net/http"
	"testing"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/pix/pixtest"
)

// TestLookup2xxNot200IsNoProofOfAbsence_R16 shows R16: "not found" fails an
// unknown send after the consistency window (5 min by default;
// FailureNotFound, transient: the payout retry policy opens a new idEnvio,
// R6). A GET answered 202 or 204 (a gateway, a PSP's "still processing")
// names nothing and proves nothing, so Lookup must carry an Exchange.Err
// for it (attempts.classifyLookup also reads only a 200 or 404 as absence).
func TestLookup2xxNot200IsNoProofOfAbsence_R16(t *testing.T) {
	e := newEnv(t, pixtest.Options{})
	for _, op := range []providers.Operation{providers.OpPixTransfer, providers.OpPixCharge} {
		for _, status := range []int{http.StatusAccepted, http.StatusNoContent} {
			e.srv.FailNext(status, "")
			lr := e.lookup(op, ref(t))
			code := lr.Exchange.StatusCode
			readAsNotFound := lr.Exchange.Err == nil && !lr.Found && (code == 404 || (code >= 200 && code < 300))
			if code != status {
				t.Fatalf("%s: status %d, want the canned %d", op, code, status)
			}
			if readAsNotFound {
				t.Errorf("%s: HTTP %d to the lookup GET is returned as a clean \"not found\"", op, code)
			}
		}
	}
}

// R16: a send the PSP has done (REALIZADO or processing) is looked up while
// the PSP's edge answers every path with a generic RFC 7807 404 (Spring's
// ProblemDetail for an unmapped route, an API gateway during a deploy or
// an outage). Only the endpoint's own "not found" code is absence: this
// 404 must be inconclusive. (It was read as absence; past the window the
// unknown send would fail and the retry policy open a new idEnvio: the
// same transfer paid twice.)
func TestGenericProblem404IsNoProofOfAbsence_R16(t *testing.T) {
	e := newEnv(t, pixtest.Options{})
	r := ref(t)
	sr, out := e.submit(providers.OpPixTransfer, providers.OperationInput{Amount: "1.00", Currency: "BRL",
		Destination: keyDest("a@b.com")}, r)
	if out != attempts.OutcomeSucceeded && out != attempts.OutcomeProcessing {
		t.Fatalf("submit: %s %+v", out, sr.Exchange)
	}
	if lr := e.lookup(providers.OpPixTransfer, r); !lr.Found {
		t.Fatalf("the PSP holds the send: %+v", lr)
	}
	e.srv.FailNext(http.StatusNotFound, `{"type":"about:blank","title":"Not Found","status":404,`+
		`"detail":"No endpoint GET /v2/gn/pix/enviados/id-envio/`+r+`.","instance":"/v2/gn/pix/enviados/id-envio/`+r+`"}`)
	lr := e.lookup(providers.OpPixTransfer, r)
	if lr.Exchange.StatusCode != http.StatusNotFound {
		t.Fatalf("status %d, want the canned 404", lr.Exchange.StatusCode)
	}
	if lr.Exchange.Err == nil && !lr.Found {
		t.Errorf("a gateway's generic 404 problem (type about:blank) for a send the PSP holds is returned as a clean \"not found\" (proof of absence)")
	}
}

// R16: each lookup endpoint's absence is its own code (CobNaoEncontrado,
// PixDevolucaoNaoEncontrada, the send API's); another endpoint's code, or
// the generic NaoEncontrado of an unmapped route, proves nothing.
func TestNotFoundCodeIsTheEndpoints_R16(t *testing.T) {
	e := newEnv(t, pixtest.Options{})
	for _, c := range []struct {
		op   providers.Operation
		code string
	}{
		{providers.OpPixCharge, "NaoEncontrado"},
		{providers.OpPixCharge, "PixEnviadoNaoEncontrado"},
		{providers.OpPixTransfer, "NaoEncontrado"},
		{providers.OpPixTransfer, "CobNaoEncontrado"},
	} {
		e.srv.FailNext(http.StatusNotFound, `{"type":"https://pix.bcb.gov.br/api/v2/error/`+c.code+`","title":"Não encontrado","status":404}`)
		lr := e.lookup(c.op, ref(t))
		if lr.Exchange.StatusCode != http.StatusNotFound {
			t.Fatalf("%s %s: status %d, want the canned 404", c.op, c.code, lr.Exchange.StatusCode)
		}
		if lr.Exchange.Err == nil {
			t.Errorf("%s: a 404 %s is read as this endpoint's \"not found\"", c.op, c.code)
		}
	}
	for _, op := range []providers.Operation{providers.OpPixCharge, providers.OpPixTransfer} {
		lr := e.lookup(op, ref(t))
		if lr.Exchange.Err != nil || lr.Found || lr.Exchange.StatusCode != http.StatusNotFound {
			t.Errorf("%s of an unknown reference: %+v; want the endpoint's own clean 404", op, lr.Exchange)
		}
	}
}

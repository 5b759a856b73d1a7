package pix_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/pix"
	"github.com/saldo/saldo/providers/pix/pixtest"
)

func cobInput() providers.OperationInput {
	return providers.OperationInput{Amount: "10.5", Currency: "BRL", ExpiresIn: time.Hour, PayerTaxID: "12345678909",
		PayerName: "Fulano de Tal", Description: "Pedido 42", Metadata: map[string]string{"order": "42"}}
}

// R20, R25: a Pix PSP has no idempotency keys, is looked up by reference,
// sends webhooks and statements; the operations follow the configured APIs.
func TestCapabilities_R20_R25(t *testing.T) {
	e := newEnv(t, pixtest.Options{})
	c := e.p.Capabilities()
	if c.IdempotencyKeys || c.KeyLifetime != 0 || !c.LookupByReference || !c.Webhooks || !c.Statements ||
		c.ConsistencyWindow != 200*time.Millisecond {
		t.Fatalf("capabilities %+v", c)
	}
	for _, op := range []providers.Operation{providers.OpPixCharge, providers.OpRefund, providers.OpPixTransfer, providers.OpBankPayout} {
		if !c.Supports(op) {
			t.Errorf("%s not supported", op)
		}
	}
	if c.Supports(providers.OpCardCharge) {
		t.Error("card_charge supported")
	}
	sendOnly := e.adapter(func(c *pix.Config) { c.BaseURL = "" })
	if sc := sendOnly.Capabilities(); sc.Supports(providers.OpPixCharge) || !sc.Supports(providers.OpPixTransfer) {
		t.Errorf("send-only capabilities %+v", sc)
	}
	if _, err := sendOnly.EncodePayload(cobInput(), ref(t)); !errors.Is(err, providers.ErrUnsupported) {
		t.Errorf("cob on a send-only adapter: %v", err)
	}
}

func TestNewRefusesBadConfiguration(t *testing.T) {
	e := newEnv(t, pixtest.Options{})
	for name, mod := range map[string]func(*pix.Config){
		"no base URL":    func(c *pix.Config) { c.BaseURL, c.SendBaseURL = "", "" },
		"no token URL":   func(c *pix.Config) { c.TokenURL = "" },
		"no secret":      func(c *pix.Config) { c.ClientSecret = "" },
		"no key":         func(c *pix.Config) { c.ReceivingKey = "" },
		"no cert":        func(c *pix.Config) { c.CertFile = "" },
		"missing key":    func(c *pix.Config) { c.KeyFile = c.KeyFile + ".nope" },
		"CA not PEM":     func(c *pix.Config) { c.CAFile = c.KeyFile + ".nope" },
		"cert is the CA": func(c *pix.Config) { c.KeyFile = c.CAFile },
		// Never the token, the secret or a payment in clear; no credentials
		// in a URL; nothing that breaks the paths appended to it.
		"http base URL":       func(c *pix.Config) { c.BaseURL = strings.Replace(c.BaseURL, "https://", "http://", 1) },
		"http send base URL":  func(c *pix.Config) { c.SendBaseURL = strings.Replace(c.SendBaseURL, "https://", "http://", 1) },
		"http token URL":      func(c *pix.Config) { c.TokenURL = strings.Replace(c.TokenURL, "https://", "http://", 1) },
		"credentials in URL":  func(c *pix.Config) { c.BaseURL = strings.Replace(c.BaseURL, "https://", "https://u:p@", 1) },
		"query in base URL":   func(c *pix.Config) { c.SendBaseURL += "?x=1" },
		"base URL not a URL":  func(c *pix.Config) { c.BaseURL = "https://%zz" },
		"no host in base URL": func(c *pix.Config) { c.BaseURL = "https://" },
	} {
		if _, err := pix.New(e.config(mod)); !errors.Is(err, pix.ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
}

// The token: fetched once and cached across calls, renewed before it
// expires, and renewed once on a 401 (the request is then sent again: a
// 401 proves nothing was processed).
func TestTokenFetchCacheAndRefreshOn401_R12(t *testing.T) {
	e := newEnv(t, pixtest.Options{SendsFinal: true})
	var shift atomic.Int64
	e.p = e.adapter(func(c *pix.Config) {
		c.Now = func() time.Time { return time.Now().Add(time.Duration(shift.Load())) }
	})
	for range 3 {
		sr, out := e.submit(providers.OpPixTransfer, providers.OperationInput{Amount: "1.00", Currency: "BRL",
			Destination: keyDest("a@b.com")}, ref(t))
		wantOutcome(t, out, attempts.OutcomeSucceeded, sr)
	}
	if n := e.srv.TokenRequests(); n != 1 || e.p.TokenFetches() != 1 {
		t.Fatalf("%d token requests (%d fetches) for 3 calls, want 1", n, e.p.TokenFetches())
	}

	// Revoked at the PSP: the call is answered 401, the token dropped,
	// a new one fetched and the request sent once more.
	e.srv.RevokeTokens()
	r := ref(t)
	sr, out := e.submit(providers.OpPixTransfer, providers.OperationInput{Amount: "1.00", Currency: "BRL",
		Destination: keyDest("a@b.com")}, r)
	wantOutcome(t, out, attempts.OutcomeSucceeded, sr)
	if n := e.srv.TokenRequests(); n != 2 {
		t.Fatalf("%d token requests after a 401, want 2", n)
	}
	if n := e.srv.Count(http.MethodPut, "/v2/gn/pix/"+r); n != 2 || sr.Exchange.WireCalls != 2 {
		t.Fatalf("%d PUTs (%d wire calls) for the 401 and its re-send, want 2", n, sr.Exchange.WireCalls)
	}

	// Close to its expiry (1h, renewed 1 minute before), the token is
	// renewed before it is used.
	shift.Store(int64(59*time.Minute + 30*time.Second))
	if lr := e.lookup(providers.OpPixTransfer, r); !lr.Found {
		t.Fatalf("lookup %+v", lr)
	}
	if n := e.srv.TokenRequests(); n != 3 {
		t.Fatalf("%d token requests near expiry, want 3", n)
	}
	for _, req := range e.srv.Requests() {
		if req.Path == pixtest.TokenPath {
			t.Fatal("a token request is recorded as an API call")
		}
	}
}

// R2: no token means nothing was sent; the token request is not the
// attempt's exchange, so the classifier re-sends later with the same id.
func TestTokenFailureIsNotSent_R2(t *testing.T) {
	e := newEnv(t, pixtest.Options{})
	e.p = e.adapter(func(c *pix.Config) { c.ClientSecret = "wrong" })
	sr, out := e.submit(providers.OpPixCharge, cobInput(), ref(t))
	wantOutcome(t, out, attempts.OutcomeNotSent, sr)
	if sr.Exchange.Wrote || sr.Exchange.Connected || sr.Exchange.WireCalls != 0 || sr.Exchange.Err == nil {
		t.Fatalf("exchange %+v", sr.Exchange)
	}
	if n := len(e.srv.Requests()); n != 0 {
		t.Fatalf("%d API requests without a token", n)
	}
	if lr := e.lookup(providers.OpPixCharge, ref(t)); lr.Found || lr.Exchange.Err == nil || lr.Exchange.StatusCode != 0 {
		t.Fatalf("lookup without a token %+v: must prove nothing", lr)
	}
}

// Mutual TLS: the PSP refuses a client without the certificate; the
// handshake fails before anything is written (not sent).
func TestMutualTLSRequired_R2(t *testing.T) {
	e := newEnv(t, pixtest.Options{})
	p := e.adapter(func(c *pix.Config) { c.TLS = &tls.Config{RootCAs: e.certs.CA} })
	sr := p.Submit(context.Background(), providers.SubmitRequest{Operation: providers.OpPixCharge, Reference: strings.Repeat("a", 32),
		Payload: []byte(`{"path":"/cob/` + strings.Repeat("a", 32) + `","body":{}}`)})
	if out := attempts.Classify(sr); out != attempts.OutcomeNotSent {
		t.Fatalf("without a client certificate: %s (%v)", out, sr.Exchange.Err)
	}
	if e.srv.TokenRequests() != 0 || len(e.srv.Requests()) != 0 {
		t.Fatal("the PSP served a client without a certificate")
	}
}

// pix_charge: PUT /cob/{txid} checked field by field; created is
// "succeeded" for Submit (the attempts core keeps it open); lookups say
// ATIVA processing, CONCLUIDA succeeded with the paying Pix's endToEndId.
func TestPixChargeCobLifecycle_R13(t *testing.T) {
	e := newEnv(t, pixtest.Options{})
	txid := ref(t)
	sr, out := e.submit(providers.OpPixCharge, cobInput(), txid)
	wantOutcome(t, out, attempts.OutcomeSucceeded, sr)
	checkRequest(t, e.lastRequest(http.MethodPut, pixtest.StandardPrefix+"/cob/"+txid), http.MethodPut,
		pixtest.StandardPrefix+"/cob/"+txid, map[string]any{
			"calendario":         map[string]any{"expiracao": 3600},
			"devedor":            map[string]any{"cpf": "12345678909", "nome": "Fulano de Tal"},
			"valor":              map[string]any{"original": "10.50"},
			"chave":              receivingKey,
			"solicitacaoPagador": "Pedido 42",
		})
	if sr.Exchange.StatusCode != http.StatusCreated || sr.ProviderID != "" {
		t.Fatalf("status %d provider id %q", sr.Exchange.StatusCode, sr.ProviderID)
	}
	var d pix.CobData
	if err := json.Unmarshal(sr.Data, &d); err != nil || d.TxID != txid || d.Status != pix.CobAtiva || d.CopyPaste == "" ||
		d.Location == "" || time.Until(d.ExpiresAt) < 59*time.Minute || time.Until(d.ExpiresAt) > time.Hour {
		t.Fatalf("cob data %s (%v)", sr.Data, err)
	}

	lr := e.lookup(providers.OpPixCharge, txid)
	checkRequest(t, e.lastRequest(http.MethodGet, pixtest.StandardPrefix+"/cob/"+txid), http.MethodGet,
		pixtest.StandardPrefix+"/cob/"+txid, nil)
	if !lr.Found || lr.State != providers.StateProcessing || lr.ProviderID != "" || lr.Amount != "10.50" || lr.Currency != "BRL" {
		t.Fatalf("active cob lookup %+v", lr)
	}
	e2e, err := e.srv.PayCob(txid)
	if err != nil {
		t.Fatal(err)
	}
	lr = e.lookup(providers.OpPixCharge, txid)
	if !lr.Found || lr.State != providers.StateSucceeded || lr.ProviderID != e2e || lr.Amount != "10.50" {
		t.Fatalf("paid cob lookup %+v", lr)
	}
	if err := json.Unmarshal(lr.Data, &d); err != nil || d.EndToEndID != e2e || d.Status != pix.CobConcluida || d.PaidAt.IsZero() {
		t.Fatalf("paid cob data %s", lr.Data)
	}
}

// Every cob status: ATIVA past its expiry (+ grace) is failed cob_expired
// (the record's status never says expired); removed cobs are failed.
func TestCobStatuses(t *testing.T) {
	e := newEnv(t, pixtest.Options{})
	var shift atomic.Int64
	e.p = e.adapter(func(c *pix.Config) {
		c.Now = func() time.Time { return time.Now().Add(time.Duration(shift.Load())) }
		c.ExpiryGrace = 5 * time.Minute
	})
	in := cobInput()
	in.ExpiresIn = time.Minute
	active, byUser, byPSP := ref(t), ref(t), ref(t)
	for _, r := range []string{active, byUser, byPSP} {
		if sr, out := e.submit(providers.OpPixCharge, in, r); out != attempts.OutcomeSucceeded {
			wantOutcome(t, out, attempts.OutcomeSucceeded, sr)
		}
	}
	if err := e.srv.RemoveCob(byUser, false); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.RemoveCob(byPSP, true); err != nil {
		t.Fatal(err)
	}
	shift.Store(int64(3 * time.Minute)) // expired, within the grace
	if lr := e.lookup(providers.OpPixCharge, active); lr.State != providers.StateProcessing {
		t.Fatalf("cob in its grace: %+v", lr)
	}
	if lr := e.lookup(providers.OpPixCharge, byUser); lr.State != providers.StateFailed || lr.FailureCode != pix.FailureCobRemoved {
		t.Fatalf("removed by the receiver: %+v", lr)
	}
	if lr := e.lookup(providers.OpPixCharge, byPSP); lr.State != providers.StateFailed || lr.FailureCode != pix.FailureCobExpired {
		t.Fatalf("removed by the PSP after expiry: %+v", lr)
	}
	shift.Store(int64(7 * time.Minute))
	lr := e.lookup(providers.OpPixCharge, active)
	if lr.State != providers.StateFailed || lr.FailureCode != pix.FailureCobExpired {
		t.Fatalf("expired cob: %+v", lr)
	}
}

// refund: PUT /pix/{e2eid}/devolucao/{id} field by field; EM_PROCESSAMENTO
// processing, DEVOLVIDO succeeded, NAO_REALIZADO failed; never above the
// Pix (400 with violacoes naming devolucao.valor: failed).
func TestRefundLifecycle_R21(t *testing.T) {
	e := newEnv(t, pixtest.Options{})
	txid := ref(t)
	e.submit(providers.OpPixCharge, cobInput(), txid)
	e2e, err := e.srv.PayCob(txid)
	if err != nil {
		t.Fatal(err)
	}
	refund := func(amount string) (string, providers.SubmitResult, attempts.Outcome) {
		r := ref(t)
		sr, out := e.submit(providers.OpRefund, providers.OperationInput{Amount: amount, Currency: "BRL",
			ChargeProviderID: e2e, ChargeReference: txid, Description: "devolução parcial"}, r)
		return r, sr, out
	}
	r1, sr, out := refund("4")
	wantOutcome(t, out, attempts.OutcomeProcessing, sr)
	path := pixtest.StandardPrefix + "/pix/" + e2e + "/devolucao/" + r1
	checkRequest(t, e.lastRequest(http.MethodPut, path), http.MethodPut, path,
		map[string]any{"valor": "4.00", "natureza": "ORIGINAL", "descricao": "devolução parcial"})
	if !strings.HasPrefix(sr.ProviderID, "D") || len(sr.ProviderID) != 32 {
		t.Fatalf("rtrId %q", sr.ProviderID)
	}
	if lr := e.lookup(providers.OpRefund, r1); !lr.Found || lr.State != providers.StateProcessing || lr.ProviderID != sr.ProviderID ||
		lr.Amount != "4.00" {
		t.Fatalf("lookup %+v", lr)
	}
	checkRequest(t, e.lastRequest(http.MethodGet, path), http.MethodGet, path, nil)
	if err := e.srv.SettleRefund(r1, true); err != nil {
		t.Fatal(err)
	}
	if lr := e.lookup(providers.OpRefund, r1); lr.State != providers.StateSucceeded {
		t.Fatalf("DEVOLVIDO: %+v", lr)
	}

	r2, sr, out := refund("6.00")
	wantOutcome(t, out, attempts.OutcomeProcessing, sr)
	if err := e.srv.SettleRefund(r2, false); err != nil {
		t.Fatal(err)
	}
	if lr := e.lookup(providers.OpRefund, r2); lr.State != providers.StateFailed || lr.FailureCode != pix.FailureNaoRealizado ||
		lr.FailureReason == "" {
		t.Fatalf("NAO_REALIZADO: %+v", lr)
	}

	// 4.00 returned of 10.50: 6.51 would exceed the Pix.
	_, sr, out = refund("6.51")
	wantOutcome(t, out, attempts.OutcomeFailed, sr)
	if sr.FailureCode != "PixDevolucaoInvalida" || !strings.Contains(sr.FailureReason, "devolucao.valor") {
		t.Fatalf("failure %q %q", sr.FailureCode, sr.FailureReason)
	}
	// Refunds final at once.
	e2 := newEnv(t, pixtest.Options{RefundsFinal: true})
	e2.submit(providers.OpPixCharge, cobInput(), txid)
	e2e, _ = e2.srv.PayCob(txid)
	sr, out = e2.submit(providers.OpRefund, providers.OperationInput{Amount: "10.50", Currency: "BRL", ChargeProviderID: e2e}, ref(t))
	wantOutcome(t, out, attempts.OutcomeSucceeded, sr)
}

// A repeated devolucao PUT is a 400 in the BCB description ("um {id} já
// utilizado"): duplicate, resolved by lookup, never failed and never a new
// id (R6, R14).
func TestRefundRepeatedPutIsDuplicateNotFailed_R14(t *testing.T) {
	e := newEnv(t, pixtest.Options{})
	txid := ref(t)
	e.submit(providers.OpPixCharge, cobInput(), txid)
	e2e, _ := e.srv.PayCob(txid)
	r := ref(t)
	in := providers.OperationInput{Amount: "1.00", Currency: "BRL", ChargeProviderID: e2e}
	e.submit(providers.OpRefund, in, r)
	sr, out := e.submit(providers.OpRefund, in, r)
	if sr.Exchange.StatusCode != http.StatusBadRequest || sr.Refinement != providers.RefineDuplicate {
		t.Fatalf("status %d refinement %q", sr.Exchange.StatusCode, sr.Refinement)
	}
	wantOutcome(t, out, attempts.OutcomeInFlight, sr)
	if out.Status() != attempts.StatusUnknown {
		t.Fatalf("a duplicate leads to %s", out.Status())
	}
	if lr := e.lookup(providers.OpRefund, r); !lr.Found || lr.State != providers.StateProcessing {
		t.Fatalf("lookup %+v", lr)
	}
}

// A process that never saw the refund's payload (restart, another
// process) finds it by searching the received Pix with devolucoes.
func TestRefundLookupWithoutTheEndToEndId(t *testing.T) {
	e := newEnv(t, pixtest.Options{RefundsFinal: true})
	txid := ref(t)
	e.submit(providers.OpPixCharge, cobInput(), txid)
	e2e, _ := e.srv.PayCob(txid)
	r := ref(t)
	e.submit(providers.OpRefund, providers.OperationInput{Amount: "2.00", Currency: "BRL", ChargeProviderID: e2e}, r)
	fresh := e.adapter()
	lr, err := fresh.Lookup(context.Background(), providers.OpRefund, r)
	if err != nil || !lr.Found || lr.State != providers.StateSucceeded || lr.Amount != "2.00" {
		t.Fatalf("lookup %+v %v", lr, err)
	}
	var rd pix.RefundData
	if json.Unmarshal(lr.Data, &rd); rd.EndToEndID != e2e {
		t.Fatalf("data %s", lr.Data)
	}
	q := e.lastRequest(http.MethodGet, pixtest.StandardPrefix+"/pix").Query
	if v, _ := url.ParseQuery(q); v.Get("devolucaoPresente") != "true" || v.Get("inicio") == "" || v.Get("fim") == "" {
		t.Fatalf("search query %s", q)
	}
	// Then it remembers: the next lookup is one GET of the devolucao.
	if lr, _ := fresh.Lookup(context.Background(), providers.OpRefund, r); !lr.Found ||
		!strings.HasSuffix(lr.Exchange.URL, "/devolucao/"+r) {
		t.Fatalf("second lookup %s", lr.Exchange.URL)
	}
	// Not found by the search: inconclusive, never "not found" (a refund
	// failed on it could be made again under a new id, R16).
	lr, _ = e.adapter().Lookup(context.Background(), providers.OpRefund, ref(t))
	if lr.Found || lr.Exchange.Err == nil {
		t.Fatalf("absent refund %+v", lr)
	}
	// A restarted process handed the attempt's payload (providers.Recaller,
	// what the attempts core does before every lookup) makes one GET.
	restarted := e.adapter()
	payload, err := e.p.EncodePayload(providers.OperationInput{Operation: providers.OpRefund, Amount: "2.00", Currency: "BRL",
		ChargeProviderID: e2e}, r)
	if err != nil {
		t.Fatal(err)
	}
	restarted.Recall(providers.OpRefund, r, payload)
	if lr, _ := restarted.Lookup(context.Background(), providers.OpRefund, r); !lr.Found ||
		!strings.HasSuffix(lr.Exchange.URL, "/pix/"+e2e+"/devolucao/"+r) {
		t.Fatalf("lookup after Recall %s", lr.Exchange.URL)
	}
	// A payload for another reference teaches nothing.
	stranger := e.adapter()
	stranger.Recall(providers.OpRefund, ref(t), payload)
	if lr, _ := stranger.Lookup(context.Background(), providers.OpRefund, r); !strings.Contains(lr.Exchange.URL, "devolucaoPresente") &&
		strings.HasSuffix(lr.Exchange.URL, "/devolucao/"+r) {
		t.Fatalf("a mismatched payload was used: %s", lr.Exchange.URL)
	}

	// With the endToEndId known, 404 is "not found" (R16 decides).
	other := ref(t)
	if _, err := e.p.EncodePayload(providers.OperationInput{Operation: providers.OpRefund, Amount: "1.00", Currency: "BRL",
		ChargeProviderID: e2e}, other); err != nil {
		t.Fatal(err)
	}
	if lr := e.lookup(providers.OpRefund, other); lr.Found || lr.Exchange.Err != nil || lr.Exchange.StatusCode != http.StatusNotFound {
		t.Fatalf("refund never sent %+v", lr)
	}
}

// pix_transfer to a key and bank_payout to an account: Efí's PUT field by
// field; EM_PROCESSAMENTO, REALIZADO and NAO_REALIZADO.
func TestSends(t *testing.T) {
	e := newEnv(t, pixtest.Options{})
	rk := ref(t)
	dest := keyDest("maria@example.com")
	dest.HolderTaxID = "12345678909"
	sr, out := e.submit(providers.OpPixTransfer, providers.OperationInput{Amount: "12.34", Currency: "BRL", Destination: dest,
		Description: "Repasse"}, rk)
	wantOutcome(t, out, attempts.OutcomeProcessing, sr)
	checkRequest(t, e.lastRequest(http.MethodPut, "/v2/gn/pix/"+rk), http.MethodPut, "/v2/gn/pix/"+rk, map[string]any{
		"valor":      "12.34",
		"pagador":    map[string]any{"chave": receivingKey, "infoPagador": "Repasse"},
		"favorecido": map[string]any{"chave": "maria@example.com", "cpf": "12345678909"},
	})
	if !strings.HasPrefix(sr.ProviderID, "E") || len(sr.ProviderID) != 32 {
		t.Fatalf("e2e %q", sr.ProviderID)
	}
	rb := ref(t)
	sr2, out := e.submit(providers.OpBankPayout, providers.OperationInput{Amount: "100", Currency: "BRL", Destination: bankDest()}, rb)
	wantOutcome(t, out, attempts.OutcomeProcessing, sr2)
	checkRequest(t, e.lastRequest(http.MethodPut, "/v2/gn/pix/"+rb), http.MethodPut, "/v2/gn/pix/"+rb, map[string]any{
		"valor":   "100.00",
		"pagador": map[string]any{"chave": receivingKey},
		"favorecido": map[string]any{"contaBanco": map[string]any{"nome": "Maria da Silva", "cpf": "12345678909",
			"codigoBanco": "60701190", "agencia": "0001", "conta": "123456", "tipoConta": "cacc"}},
	})

	lp := "/v2/gn/pix/enviados/id-envio/" + rk
	if lr := e.lookup(providers.OpPixTransfer, rk); !lr.Found || lr.State != providers.StateProcessing || lr.ProviderID != sr.ProviderID {
		t.Fatalf("lookup %+v", lr)
	}
	checkRequest(t, e.lastRequest(http.MethodGet, lp), http.MethodGet, lp, nil)
	if err := e.srv.SettleSend(rk, true); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.SettleSend(rb, false); err != nil {
		t.Fatal(err)
	}
	if lr := e.lookup(providers.OpPixTransfer, rk); lr.State != providers.StateSucceeded || lr.Amount != "12.34" {
		t.Fatalf("REALIZADO %+v", lr)
	}
	if lr := e.lookup(providers.OpBankPayout, rb); lr.State != providers.StateFailed || lr.FailureCode != pix.FailureNaoRealizado {
		t.Fatalf("NAO_REALIZADO %+v", lr)
	}
	fin := newEnv(t, pixtest.Options{SendsFinal: true})
	sr, out = fin.submit(providers.OpPixTransfer, providers.OperationInput{Amount: "1.00", Currency: "BRL", Destination: keyDest("x@y.z")}, ref(t))
	wantOutcome(t, out, attempts.OutcomeSucceeded, sr)
}

// 409 on a repeated PUT (cob and send) is "duplicate": in flight, then
// unknown, resolved by lookup; the same id every time (R6, R14, R20).
func TestRepeatedPut409ResolvedByLookup_R14(t *testing.T) {
	e := newEnv(t, pixtest.Options{SendsFinal: true})
	for _, c := range []struct {
		op   providers.Operation
		in   providers.OperationInput
		path string
	}{
		{providers.OpPixCharge, cobInput(), pixtest.StandardPrefix + "/cob/"},
		{providers.OpPixTransfer, providers.OperationInput{Amount: "3.00", Currency: "BRL", Destination: keyDest("k@x.com")}, "/v2/gn/pix/"},
	} {
		r := ref(t)
		e.submit(c.op, c.in, r)
		sr, out := e.submit(c.op, c.in, r)
		if sr.Exchange.StatusCode != http.StatusConflict || sr.Refinement != providers.RefineDuplicate {
			t.Fatalf("%s: status %d refinement %q", c.op, sr.Exchange.StatusCode, sr.Refinement)
		}
		wantOutcome(t, out, attempts.OutcomeInFlight, sr)
		if n := e.srv.Count(http.MethodPut, c.path+r); n != 2 {
			t.Fatalf("%s: %d PUTs, want the 2 made, both with the same id", c.op, n)
		}
		if lr := e.lookup(c.op, r); !lr.Found || lr.State == "" {
			t.Fatalf("%s lookup %+v", c.op, lr)
		}
	}
}

// 400 with violacoes: failed, naming the violated field.
func TestBadRequestWithViolacoesFailsNamingTheField(t *testing.T) {
	e := newEnv(t, pixtest.Options{})
	e.p = e.adapter(func(c *pix.Config) { c.ReceivingKey = "someone-elses-key@example.com" })
	sr, out := e.submit(providers.OpPixCharge, cobInput(), ref(t))
	wantOutcome(t, out, attempts.OutcomeFailed, sr)
	if sr.FailureCode != "CobOperacaoInvalida" || !strings.Contains(sr.FailureReason, "cob.chave") ||
		sr.Refinement != providers.RefineDeclined {
		t.Fatalf("failure %q %q %q", sr.FailureCode, sr.FailureReason, sr.Refinement)
	}
	// Efí's own error shape.
	e.srv.FailNext(http.StatusBadRequest, `{"nome":"chave_invalida","mensagem":"A chave informada não faz referência à conta"}`)
	sr, out = e.submit(providers.OpPixTransfer, providers.OperationInput{Amount: "1.00", Currency: "BRL", Destination: keyDest("a@b.c")}, ref(t))
	wantOutcome(t, out, attempts.OutcomeFailed, sr)
	if sr.FailureCode != "chave_invalida" || !strings.Contains(sr.FailureReason, "não faz referência") {
		t.Fatalf("failure %q %q", sr.FailureCode, sr.FailureReason)
	}
}

// 422 insufficient funds: failed.
func TestInsufficientFundsFails(t *testing.T) {
	e := newEnv(t, pixtest.Options{Balance: "5.00"})
	sr, out := e.submit(providers.OpPixTransfer, providers.OperationInput{Amount: "5.01", Currency: "BRL", Destination: keyDest("a@b.c")}, ref(t))
	wantOutcome(t, out, attempts.OutcomeFailed, sr)
	if sr.Exchange.StatusCode != http.StatusUnprocessableEntity || sr.FailureCode != "SaldoInsuficiente" {
		t.Fatalf("status %d failure %q", sr.Exchange.StatusCode, sr.FailureCode)
	}
}

// 5xx, 408 and a cut after the write are unknown; 429 is rate limited.
func TestServerErrorsAndCutsAreUnknown_R2(t *testing.T) {
	e := newEnv(t, pixtest.Options{SendsFinal: true})
	e.p = e.adapter(func(c *pix.Config) { c.HTTP.ReadTimeout = 300 * time.Millisecond })
	in := providers.OperationInput{Amount: "1.00", Currency: "BRL", Destination: keyDest("a@b.c")}
	for _, c := range []struct {
		status int
		body   string
		want   attempts.Outcome
	}{
		{500, `{"type":"https://pix.bcb.gov.br/api/v2/error/ErroInternoDoServidor","title":"Erro","status":500}`, attempts.OutcomeUnknown},
		{503, `{"type":"https://pix.bcb.gov.br/api/v2/error/ServicoIndisponivel","title":"Indisponível","status":503}`, attempts.OutcomeUnknown},
		{504, `{"type":"https://pix.bcb.gov.br/api/v2/error/IndisponibilidadePorTempoEsgotado","title":"Tempo","status":504}`, attempts.OutcomeUnknown},
		{408, ``, attempts.OutcomeUnknown},
		{429, `{"nome":"limite","mensagem":"muitas requisições"}`, attempts.OutcomeRateLimited},
	} {
		e.srv.FailNext(c.status, c.body)
		sr, out := e.submit(providers.OpPixTransfer, in, ref(t))
		wantOutcome(t, out, c.want, sr)
	}
	// The PSP commits, then never answers: written, no answer, unknown;
	// the send exists and a lookup finds it.
	e.srv.HangAfterCommit(1)
	r := ref(t)
	sr, out := e.submit(providers.OpPixTransfer, in, r)
	wantOutcome(t, out, attempts.OutcomeUnknown, sr)
	if !sr.Exchange.Wrote || !sr.Exchange.Timeout {
		t.Fatalf("exchange %+v", sr.Exchange)
	}
	if lr := e.lookup(providers.OpPixTransfer, r); !lr.Found || lr.State != providers.StateSucceeded {
		t.Fatalf("lookup after the cut %+v", lr)
	}
	// A 2xx whose body names another id, or no status saldo knows: unknown.
	e.srv.FailNext(201, `{"idEnvio":"other","e2eId":"E1","valor":"1.00","status":"REALIZADO"}`)
	sr, out = e.submit(providers.OpPixTransfer, in, ref(t))
	wantOutcome(t, out, attempts.OutcomeUnknown, sr)
}

// R16: a fresh operation is invisible for a while; the lookup then says
// "not found" (404, no error) and only after the window does it show.
func TestLookupBeforeAndAfterConsistencyWindow_R16(t *testing.T) {
	// The window is long against the 200 ms the hung send takes, so that
	// the first lookup falls inside it on a loaded machine too (with 400 ms
	// it came 200 ms from the window's end); the second waits it out.
	const lag = 3 * time.Second
	e := newEnv(t, pixtest.Options{LookupLag: lag, SendsFinal: true})
	e.p = e.adapter(func(c *pix.Config) { c.HTTP.ReadTimeout = 200 * time.Millisecond })
	for _, op := range []providers.Operation{providers.OpPixTransfer, providers.OpPixCharge} {
		in := providers.OperationInput{Amount: "1.00", Currency: "BRL", Destination: keyDest("a@b.c")}
		if op == providers.OpPixCharge {
			in = cobInput()
		}
		e.srv.HangAfterCommit(1)
		r := ref(t)
		start := time.Now()
		sr, out := e.submit(op, in, r)
		wantOutcome(t, out, attempts.OutcomeUnknown, sr)
		lr := e.lookup(op, r)
		if time.Since(start) >= lag {
			t.Fatalf("%s: the send and the first lookup took %s, past the %s window: nothing shown", op, time.Since(start), lag)
		}
		if lr.Found || lr.Exchange.StatusCode != http.StatusNotFound || lr.Exchange.Err != nil {
			t.Fatalf("%s inside the window: %+v", op, lr)
		}
		// After the window (counted from the PSP's commit, a little after
		// start) the lookup finds it.
		time.Sleep(time.Until(start.Add(lag)))
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			lr := e.lookup(op, r)
			if lr.Found {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s after the window: %+v", op, lr)
			}
		}
	}
	// A 404 that is not the API's problem+json (a proxy's page) proves
	// nothing.
	e.srv.FailNext(404, `<html>Not Found</html>`)
	if lr := e.lookup(providers.OpPixTransfer, ref(t)); lr.Found || lr.Exchange.Err == nil {
		t.Fatalf("bare 404 lookup %+v", lr)
	}
	// A lookup that fails proves nothing: the exchange says so.
	e.srv.FailNext(503, `{"title":"x","status":503}`)
	if lr := e.lookup(providers.OpPixTransfer, ref(t)); lr.Found || lr.Exchange.StatusCode != 503 {
		t.Fatalf("503 lookup %+v", lr)
	}
}

// R5: the payload is a pure function of the input; Submit sends the stored
// body byte for byte.
func TestPayloadStableAndSentVerbatim_R5(t *testing.T) {
	e := newEnv(t, pixtest.Options{})
	txid := ref(t)
	in := cobInput()
	in.Operation = providers.OpPixCharge
	a, err1 := e.p.EncodePayload(in, txid)
	b, err2 := e.p.EncodePayload(in, txid)
	if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
		t.Fatalf("payload not stable: %s / %s", a, b)
	}
	var env struct {
		Path string          `json:"path"`
		Body json.RawMessage `json:"body"`
	}
	if err := json.Unmarshal(a, &env); err != nil || env.Path != "/cob/"+txid {
		t.Fatalf("envelope %s", a)
	}
	e.p.Submit(context.Background(), providers.SubmitRequest{Operation: providers.OpPixCharge, Reference: txid, Payload: a})
	if got := e.lastRequest(http.MethodPut, pixtest.StandardPrefix+"/cob/"+txid).Body; !bytes.Equal(got, env.Body) {
		t.Fatalf("sent %s, stored %s", got, env.Body)
	}
	// A payload whose path names another reference never leaves.
	sr := e.p.Submit(context.Background(), providers.SubmitRequest{Operation: providers.OpPixCharge, Reference: ref(t), Payload: a})
	if attempts.Classify(sr) != attempts.OutcomeNotSent {
		t.Fatal("a payload for another reference was sent")
	}
}

func TestEncodePayloadRefuses(t *testing.T) {
	e := newEnv(t, pixtest.Options{})
	r := ref(t)
	for name, c := range map[string]struct {
		in        providers.OperationInput
		reference string
	}{
		"USD":                  {providers.OperationInput{Operation: providers.OpPixCharge, Amount: "1.00", Currency: "USD"}, r},
		"3 decimals":           {providers.OperationInput{Operation: providers.OpPixCharge, Amount: "1.001", Currency: "BRL"}, r},
		"zero":                 {providers.OperationInput{Operation: providers.OpPixCharge, Amount: "0", Currency: "BRL"}, r},
		"11 digits":            {providers.OperationInput{Operation: providers.OpPixCharge, Amount: "12345678901", Currency: "BRL"}, r},
		"short txid":           {providers.OperationInput{Operation: providers.OpPixCharge, Amount: "1", Currency: "BRL"}, "abc"},
		"long description":     {providers.OperationInput{Operation: providers.OpPixCharge, Amount: "1", Currency: "BRL", Description: strings.Repeat("é", 141)}, r},
		"refund without e2eid": {providers.OperationInput{Operation: providers.OpRefund, Amount: "1", Currency: "BRL", ChargeProviderID: r}, r},
		"payout to a key":      {providers.OperationInput{Operation: providers.OpBankPayout, Amount: "1", Currency: "BRL", Destination: keyDest("a@b.c")}, r},
		"no destination":       {providers.OperationInput{Operation: providers.OpPixTransfer, Amount: "1", Currency: "BRL"}, r},
		"account without holder": {providers.OperationInput{Operation: providers.OpPixTransfer, Amount: "1", Currency: "BRL",
			Destination: &providers.Destination{BankAccount: bankDest().BankAccount}}, r},
		"payer on a send": {providers.OperationInput{Operation: providers.OpPixTransfer, Amount: "1", Currency: "BRL",
			Destination: keyDest("a@b.c"), PayerName: "x"}, r},
		"id too long": {providers.OperationInput{Operation: providers.OpPixTransfer, Amount: "1", Currency: "BRL",
			Destination: keyDest("a@b.c")}, strings.Repeat("a", 36)},
	} {
		if _, err := e.p.EncodePayload(c.in, c.reference); !errors.Is(err, providers.ErrInvalidInput) {
			t.Errorf("%s: %v, want ErrInvalidInput", name, err)
		}
	}
	// A payer tax id without a name leaves devedor out (the standard
	// requires both).
	txid := ref(t)
	in := cobInput()
	in.PayerName = ""
	e.submit(providers.OpPixCharge, in, txid)
	if b := e.lastRequest(http.MethodPut, pixtest.StandardPrefix+"/cob/"+txid).Body; bytes.Contains(b, []byte("devedor")) {
		t.Fatalf("body %s", b)
	}
}

// R5, R12: a request refused with 401 even after a fresh token, or with
// 403, was processed by nobody: auth_refused (the attempt waits for an
// operator to fix the credentials), never failed, and the alert names no
// secret. Sent again with the same id once the PSP takes the credentials,
// it makes the one send.
func TestRefusedCredentialsAreAuthRefused_R5_R12(t *testing.T) {
	var logs bytes.Buffer
	e := newEnv(t, pixtest.Options{SendsFinal: true})
	e.p = e.adapter(func(c *pix.Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	in := providers.OperationInput{Amount: "1.00", Currency: "BRL", Destination: keyDest("a@b.c")}
	unauthorized := `{"nome":"nao_autorizado","mensagem":"token invalido"}`

	// 401 on the first token and on the fresh one: two wire calls, refused.
	r := ref(t)
	e.srv.FailNext(http.StatusUnauthorized, unauthorized)
	e.srv.FailNext(http.StatusUnauthorized, unauthorized)
	sr, out := e.submit(providers.OpPixTransfer, in, r)
	wantOutcome(t, out, attempts.OutcomeAuthRefused, sr)
	if sr.Exchange.WireCalls != 2 || sr.Refinement != providers.RefineAuthRefused {
		t.Fatalf("wire calls %d refinement %q, want 2 and auth_refused", sr.Exchange.WireCalls, sr.Refinement)
	}
	// 403 (a scope the PSP does not grant): no token renewal, refused.
	e.srv.FailNext(http.StatusForbidden, `{"nome":"acesso_negado","mensagem":"escopo insuficiente"}`)
	sr, out = e.submit(providers.OpPixTransfer, in, r)
	wantOutcome(t, out, attempts.OutcomeAuthRefused, sr)
	if sr.Exchange.WireCalls != 1 {
		t.Fatalf("%d wire calls for a 403, want 1", sr.Exchange.WireCalls)
	}
	if lr := e.lookup(providers.OpPixTransfer, r); lr.Found {
		t.Fatalf("a refused send exists at the PSP: %+v", lr)
	}

	// Credentials fixed: the same id makes the one send.
	sr, out = e.submit(providers.OpPixTransfer, in, r)
	wantOutcome(t, out, attempts.OutcomeSucceeded, sr)
	if lr := e.lookup(providers.OpPixTransfer, r); !lr.Found || lr.State != providers.StateSucceeded {
		t.Fatalf("lookup after the fix %+v", lr)
	}

	if !strings.Contains(logs.String(), "request refused") || strings.Count(logs.String(), "level=ERROR") != 2 {
		t.Fatalf("want two ERROR alerts, got:\n%s", logs.String())
	}
	for _, secret := range []string{clientSecret, "Bearer", "access_token"} {
		if strings.Contains(logs.String(), secret) {
			t.Fatalf("the alert leaks %q:\n%s", secret, logs.String())
		}
	}
}

package engine_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/internal/engine"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/pix"
	"github.com/saldo/saldo/providers/pix/pixtest"
)

// Issue 15 end to end: the Pix adapter against a fake PSP over mutual TLS,
// routed by the engine. A Pix transfer to a key, one to a bank account, a
// cob paid and then refunded in part: each call hangs after the PSP
// committed it, the attempt goes unknown, and the lookup resolves it; a
// send the PSP never made fails only after the consistency window. No
// PUT is ever sent twice (R14, R20: Pix has no keys, the id in the path is
// the key), and the audit is clean.
func TestPixEndToEndHangAfterCommitResolvedByLookup_R14_R20(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, srv, pool := newPixEngine(t)
	brl := func(s string) money.Amount { return money.MustParse(s, "BRL") }

	// hangThenExecute: the PSP commits the PUT and never answers; the
	// attempt is unknown, never failed, the reserve held.
	hangThenExecute := func(id *uuid.UUID) attempts.Attempt {
		t.Helper()
		require.NotNil(t, id)
		srv.HangAfterCommit(1)
		res, err := e.Attempts.Execute(ctx, *id)
		require.NoError(t, err)
		require.Equal(t, attempts.StatusUnknown, res.Attempt.Status, "a cut after the write is unknown")
		require.Equal(t, "pix", res.Attempt.Provider)
		return res.Attempt
	}
	resolve := func(a attempts.Attempt, want attempts.Status) attempts.Attempt {
		t.Helper()
		var got attempts.Attempt
		require.Eventually(t, func() bool {
			res, err := e.Attempts.Resolve(ctx, a.ID)
			require.NoError(t, err)
			got = res.Attempt
			return got.Status == want
		}, 30*time.Second, 5*time.Millisecond, "attempt %s reaches %s", a.ID, want)
		return got
	}
	// Executing an unknown attempt again sends nothing (R14).
	executeAgainSendsNothing := func(a attempts.Attempt) {
		t.Helper()
		res, err := e.Attempts.Execute(ctx, a.ID)
		require.NoError(t, err)
		require.False(t, res.Sent)
	}

	// A Pix transfer to a key.
	tr, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpPixTransfer,
		Amount: brl("25.00"), Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "ana@example.com"}}})
	require.NoError(t, err)
	require.Equal(t, "pix", tr.Provider)
	a := hangThenExecute(tr.CurrentAttemptID)
	executeAgainSendsNothing(a)
	a = resolve(a, attempts.StatusUnknown) // found EM_PROCESSAMENTO: still open
	require.Equal(t, string(providers.StateProcessing), a.ProviderState)
	require.NoError(t, srv.SettleSend(a.Reference, true))
	a = resolve(a, attempts.StatusSucceeded)
	require.Equal(t, 1, srv.Count(http.MethodPut, "/v2/gn/pix/"+a.Reference), "sent once")
	v, err := e.Payouts.Get(ctx, "m1", tr.ID)
	require.NoError(t, err)
	require.Equal(t, payouts.StatusSucceeded, v.Status)

	// One to a bank account, refused by the receiving bank.
	bp, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpBankPayout,
		Amount: brl("40.00"), Destination: &providers.Destination{BankAccount: &providers.BankAccount{ISPB: "60701190",
			Branch: "0001", Account: "12345-6", Type: "checking"}, HolderName: "Maria da Silva", HolderTaxID: "12345678909"}})
	require.NoError(t, err)
	a = hangThenExecute(bp.CurrentAttemptID)
	executeAgainSendsNothing(a)
	require.NoError(t, srv.SettleSend(a.Reference, false))
	a = resolve(a, attempts.StatusFailed)
	require.Equal(t, pix.FailureNaoRealizado, a.FailureCode)
	require.Equal(t, 1, srv.Count(http.MethodPut, "/v2/gn/pix/"+a.Reference), "sent once")
	v, err = e.Payouts.Get(ctx, "m1", bp.ID)
	require.NoError(t, err)
	require.Equal(t, payouts.StatusFailed, v.Status)

	// A cob: created under a hang, found ATIVA (still open), paid, found
	// CONCLUIDA: the charge is paid and credited once.
	ch, err := e.Charges.Create(ctx, charges.ChargeRequest{MerchantID: "m1", Kind: charges.KindPix, Amount: brl("30.00"),
		PayerName: "Fulano", PayerTaxID: "12345678909", Description: "Pedido 7"})
	require.NoError(t, err)
	require.Equal(t, "pix", ch.Provider)
	a = hangThenExecute(ch.AttemptID)
	executeAgainSendsNothing(a)
	a = resolve(a, attempts.StatusUnknown)
	require.Equal(t, string(providers.StateProcessing), a.ProviderState)
	e2e, err := srv.PayCob(a.Reference)
	require.NoError(t, err)
	a = resolve(a, attempts.StatusSucceeded)
	require.Equal(t, e2e, a.ProviderID)
	require.Equal(t, 1, srv.Count(http.MethodPut, pixtest.StandardPrefix+"/cob/"+a.Reference), "sent once")
	c, err := e.Charges.Get(ctx, "m1", ch.ID)
	require.NoError(t, err)
	require.Equal(t, charges.StatusPaid, c.Status)
	require.Equal(t, e2e, c.ProviderID)

	// Refunded in part: the devolucao is made under a hang too.
	rf, err := e.Payouts.CreateRefund(ctx, payouts.RefundRequest{MerchantID: "m1", ChargeID: ch.ID, Amount: brl("12.00")})
	require.NoError(t, err)
	require.Equal(t, "pix", rf.Provider)
	a = hangThenExecute(rf.CurrentAttemptID)
	executeAgainSendsNothing(a)
	require.NoError(t, srv.SettleRefund(a.Reference, true))
	a = resolve(a, attempts.StatusSucceeded)
	require.Equal(t, "DEVOLVIDO", srv.RefundStatus(a.Reference))
	require.Equal(t, 1, srv.Count(http.MethodPut, pixtest.StandardPrefix+"/pix/"+e2e+"/devolucao/"+a.Reference), "sent once")
	v, err = e.Payouts.Get(ctx, "m1", rf.ID)
	require.NoError(t, err)
	require.Equal(t, payouts.StatusSucceeded, v.Status)

	// A send lost before the PSP made it: written, no answer, unknown. The
	// lookup's 404 proves nothing inside the consistency window (the
	// attempt stays unknown, the reserve held); after it, the attempt fails
	// and the reserve is released (R16, R22). Still one PUT.
	lost, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpPixTransfer,
		Amount: brl("7.00"), Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "bia@example.com"}}})
	require.NoError(t, err)
	srv.LoseNext(1)
	ex, err := e.Attempts.Execute(ctx, *lost.CurrentAttemptID)
	require.NoError(t, err)
	a = ex.Attempt
	require.Equal(t, attempts.StatusUnknown, a.Status)
	time.Sleep(2 * time.Millisecond)
	rr, err := e.Attempts.Resolve(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusUnknown, rr.Attempt.Status, "not found inside the window proves nothing")
	require.Positive(t, rr.Attempt.LookupCount)
	// Past the window the 404 fails it: polled, not slept, every 100 ms so
	// that the lookups made inside the window stay far below MaxLookups
	// (60; each undecided lookup counts, R18).
	require.Eventually(t, func() bool {
		res, err := e.Attempts.Resolve(ctx, a.ID)
		require.NoError(t, err)
		a = res.Attempt
		return a.Status == attempts.StatusFailed
	}, 30*time.Second, 100*time.Millisecond, "attempt %s fails after the window", a.ID)
	require.NotNil(t, a.UnknownAt)
	require.GreaterOrEqual(t, time.Since(*a.UnknownAt), pixConsistencyWindow, "not before the window passed")
	require.Equal(t, 1, srv.Count(http.MethodPut, "/v2/gn/pix/"+a.Reference), "sent once")
	require.Empty(t, srv.SendStatus(a.Reference))
	v, err = e.Payouts.Get(ctx, "m1", lost.ID)
	require.NoError(t, err)
	require.Equal(t, payouts.StatusFailed, v.Status)

	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
}

const pixKey = "7d9f0335-8dcc-4054-9bf9-0dbd61d36906"

// readTimeout is the read timeout of the Pix and Stripe adapters these
// tests build: they assert successes, so it must be long enough that a
// loaded machine's slow answer is not read as unknown (300 ms was not, R3);
// the scripted hangs (an answer lost after the PSP committed) last far
// longer, so each takes this long to be read as a timeout.
const readTimeout = time.Second

// pixConsistencyWindow is the Pix adapter's consistency window in these
// tests: a lookup's 404 proves nothing inside it (R16). Three read timeouts,
// so that the lookup made right after a call gave up is still inside it on
// a loaded machine.
const pixConsistencyWindow = 3 * readTimeout

// newPixEngine: a fake Pix PSP (mutual TLS, OAuth2), the adapter built from
// the certificate files, an engine routing Pix operations to it, and a
// funded merchant m1.
// pixAPI serves the API of e (on pool) over real HTTP for the test.
func pixAPI(t *testing.T, e *engine.Engine, pool *pgxpool.Pool) *httptest.Server {
	t.Helper()
	apiSrv, err := api.New(api.Config{Pool: pool, Payouts: e.Payouts, Attempts: e.Attempts, Charges: e.Charges,
		Providers: e.Providers})
	require.NoError(t, err)
	hs := httptest.NewServer(apiSrv)
	t.Cleanup(hs.Close)
	return hs
}

func newPixEngine(t *testing.T) (*engine.Engine, *pixtest.Server, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	pool := testdb.New(t)
	certs, err := pixtest.NewCerts(t.TempDir())
	require.NoError(t, err)
	srv := pixtest.NewServer(certs, pixtest.Options{ClientID: "saldo", ClientSecret: "s3cret", ReceivingKey: pixKey})
	t.Cleanup(srv.Close)
	prov, err := pix.New(pix.Config{BaseURL: srv.StandardURL(), SendBaseURL: srv.SendURL(), TokenURL: srv.TokenURL(),
		ClientID: "saldo", ClientSecret: "s3cret", CertFile: certs.ClientCertFile, KeyFile: certs.ClientKeyFile,
		CAFile: certs.CAFile, ReceivingKey: pixKey, WebhookSecret: "w3bh00k", ConsistencyWindow: pixConsistencyWindow,
		HTTP: providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: readTimeout}})
	require.NoError(t, err)
	routes, err := providers.ParseRoutes("pix_charge=pix,pix_transfer=pix,bank_payout=pix")
	require.NoError(t, err)
	e, err := engine.New(engine.Config{Pool: pool, Providers: []providers.Provider{prov}, Routes: routes,
		Attempts: attempts.Config{ResolveSchedule: []time.Duration{time.Millisecond}}})
	require.NoError(t, err)
	_, err = merchants.Create(ctx, pool, "m1", "Loja")
	require.NoError(t, err)
	_, err = merchants.Fund(ctx, pool, merchants.Funding{MerchantID: "m1", Amount: money.MustParse("500.00", "BRL"), Key: "seed",
		Reason: "test", Actor: "test"})
	require.NoError(t, err)
	return e, srv, pool
}

// Webhooks through the API (issue 15, R17): POST /v1/webhooks/pix with the
// secret in the query string (?hmac=, the PSP appending "/pix" to the
// registered URL), several events in one body ({"pix": [...]}), each
// deduplicated and applied by reference; a wrong secret changes nothing.
func TestPixWebhooksThroughTheAPI_R17(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, srv, pool := newPixEngine(t)
	brl := func(s string) money.Amount { return money.MustParse(s, "BRL") }
	hs := pixAPI(t, e, pool)
	post := func(query, body string) (int, map[string]any) {
		t.Helper()
		res, err := http.Post(hs.URL+"/v1/webhooks/pix?"+query, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer res.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(res.Body).Decode(&m)
		return res.StatusCode, m
	}
	execute := func(id *uuid.UUID) attempts.Attempt {
		t.Helper()
		res, err := e.Attempts.Execute(ctx, *id)
		require.NoError(t, err)
		require.Equal(t, attempts.StatusPending, res.Attempt.Status)
		require.Equal(t, string(providers.StateProcessing), res.Attempt.ProviderState)
		return res.Attempt
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)

	// A send, confirmed by Efí's notice.
	tr, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpPixTransfer,
		Amount: brl("25.00"), Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "ana@example.com"}}})
	require.NoError(t, err)
	a := execute(tr.CurrentAttemptID)
	require.NoError(t, srv.SettleSend(a.Reference, true))
	send := `{"pix":[{"endToEndId":"` + a.ProviderID + `","valor":"25.00","horario":"` + now + `","status":"REALIZADO",` +
		`"tipo":"SOLICITACAO","chave":"` + pixKey + `","gnExtras":{"idEnvio":"` + a.Reference + `"}}]}`
	code, _ := post("hmac=wrong", send)
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = post("", send)
	require.Equal(t, http.StatusUnauthorized, code)
	v, err := e.Payouts.Get(ctx, "m1", tr.ID)
	require.NoError(t, err)
	require.Equal(t, payouts.StatusProcessing, v.Status, "a refused webhook changes nothing")
	code, ack := post("hmac=w3bh00k&ignorar=/pix", send)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, api.WebhookTransitioned, ack["outcome"])
	require.Equal(t, "envio:"+a.Reference+":REALIZADO", ack["event_id"])
	v, err = e.Payouts.Get(ctx, "m1", tr.ID)
	require.NoError(t, err)
	require.Equal(t, payouts.StatusSucceeded, v.Status)
	code, ack = post("hmac=w3bh00k", send)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, api.WebhookDuplicate, ack["outcome"])

	// A cob paid: the received Pix names the txid.
	ch, err := e.Charges.Create(ctx, charges.ChargeRequest{MerchantID: "m1", Kind: charges.KindPix, Amount: brl("30.00")})
	require.NoError(t, err)
	a = execute(ch.AttemptID)
	e2e, err := srv.PayCob(a.Reference)
	require.NoError(t, err)
	txid := a.Reference
	paid := `{"endToEndId":"` + e2e + `","txid":"` + a.Reference + `","valor":"30.00","horario":"` + now + `"}`
	code, ack = post("hmac=w3bh00k/pix", `{"pix":[`+paid+`]}`)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, api.WebhookHandled, ack["outcome"])
	c, err := e.Charges.Get(ctx, "m1", ch.ID)
	require.NoError(t, err)
	require.Equal(t, charges.StatusPaid, c.Status)

	// Refunded in part; the PSP's notice repeats the Pix with its
	// devolucoes: the Pix is a duplicate, the devolucao resolves the refund.
	rf, err := e.Payouts.CreateRefund(ctx, payouts.RefundRequest{MerchantID: "m1", ChargeID: ch.ID, Amount: brl("10.00")})
	require.NoError(t, err)
	a = execute(rf.CurrentAttemptID)
	require.NoError(t, srv.SettleRefund(a.Reference, true))
	withRefund := strings.TrimSuffix(paid, "}") + `,"devolucoes":[{"id":"` + a.Reference + `","rtrId":"` + a.ProviderID +
		`","valor":"10.00","horario":{"solicitacao":"` + now + `","liquidacao":"` + now + `"},"status":"DEVOLVIDO"}]}`
	code, ack = post("hmac=w3bh00k", `{"pix":[`+withRefund+`]}`)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, api.WebhookTransitioned, ack["outcome"])
	require.Equal(t, "pix:"+e2e+":"+txid+",devolucao:"+a.Reference+":DEVOLVIDO", ack["event_id"])
	v, err = e.Payouts.Get(ctx, "m1", rf.ID)
	require.NoError(t, err)
	require.Equal(t, payouts.StatusSucceeded, v.Status)

	// A send notice naming our idEnvio with another amount moves nothing:
	// the attempt goes to review (the amount must match the attempt).
	odd, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpPixTransfer,
		Amount: brl("8.00"), Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "ana@example.com"}}})
	require.NoError(t, err)
	a = execute(odd.CurrentAttemptID)
	wrong := `{"pix":[{"endToEndId":"` + a.ProviderID + `","valor":"80.00","horario":"` + now + `","status":"REALIZADO",` +
		`"tipo":"SOLICITACAO","gnExtras":{"idEnvio":"` + a.Reference + `"}}]}`
	code, ack = post("hmac=w3bh00k", wrong)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, api.WebhookReview, ack["outcome"])
	got, err := e.Attempts.Get(ctx, pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusPending, got.Status)
	require.True(t, got.Review)

	// A Pix to the key without a txid is not saldo's: acknowledged.
	code, ack = post("hmac=w3bh00k", `{"pix":[{"endToEndId":"E0000000020200909122100000000001","valor":"1.00","horario":"`+now+`"}]}`)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, api.WebhookUnmatched, ack["outcome"])

	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
}

package engine_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
)

const (
	reviewRtr1 = "D1234567820261205120000000000001"
)

// R9, R17, R22: a send item that carries both a NAO_REALIZADO status and a
// devolucao DEVOLVIDO (the PSP says in the same item the send was
// returned, which implies it settled). The return's settled event goes
// first, so the open send settles and the failure is a reversal; the
// reserve is never released while money left. Before, the status event
// came first and failed the send, releasing its whole reserve (found by
// review).
func TestPixSendItemFailedAndReturnedNeverReleasesTheReserve_R9_R22(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, _, pool := newPixEngine(t)
	hs := pixAPI(t, e, pool)
	brl := func(s string) money.Amount { return money.MustParse(s, "BRL") }
	now := time.Now().UTC().Format(time.RFC3339Nano)

	tr, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpPixTransfer,
		Amount: brl("20.00"), Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "ana@example.com"}}})
	require.NoError(t, err)
	rs, err := e.Attempts.Execute(ctx, *tr.CurrentAttemptID)
	require.NoError(t, err)
	a := rs.Attempt
	require.Equal(t, attempts.StatusPending, a.Status)
	require.NotEmpty(t, a.ProviderID)
	held := merchantBalances(t, pool)

	body := `{"pix":[{"endToEndId":"` + a.ProviderID + `","valor":"20.00","status":"NAO_REALIZADO","horario":{"solicitacao":"` + now + `"},` +
		`"gnExtras":{"idEnvio":"` + a.Reference + `"},` +
		`"devolucoes":[{"id":"R1","rtrId":"` + reviewRtr1 + `","valor":"20.00","status":"DEVOLVIDO","horario":{"liquidacao":"` + now + `"}}]}]}`
	code, ack := pixPost(t, hs.URL, body)
	require.Equal(t, http.StatusOK, code, "%v", ack)

	got, err := e.Attempts.Get(ctx, pool, a.ID)
	require.NoError(t, err)
	after := merchantBalances(t, pool)
	require.NotEqual(t, attempts.StatusFailed, got.Status,
		"an item saying the send was returned (so it settled) must not fail the open send first")
	require.Equal(t, held[0], after[0], "the reserve must not be released to the merchant while the item says the money left")
}

// R9, R22: the "settled" event of a return has an id of its own per
// return (the rtrId). Before, it was deduplicated by the send's
// endToEndId alone ("envio-liquidado:<e2e>", found by review). A first
// return notified
// while saldo did not yet hold the send's endToEndId (its submit answer
// lost: attempt unknown) is unmatched, and its "settled" event is recorded
// as seen. When a stale EM_PROCESSAMENTO notice then names the endToEndId
// and a second (partial) return is notified, its "settled" event is
// skipped as a duplicate and only its "failed" event is applied: the open
// send fails and its whole reserve is released while the money left
// (30.00 sent, 15.00 back).
func TestPixSecondReturnAfterAnUnmatchedFirstNeverReleasesTheReserve_R9_R22(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, srv, pool := newPixEngine(t)
	hs := pixAPI(t, e, pool)
	brl := func(s string) money.Amount { return money.MustParse(s, "BRL") }
	now := time.Now().UTC().Format(time.RFC3339Nano)

	tr, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpPixTransfer,
		Amount: brl("30.00"), Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "ana@example.com"}}})
	require.NoError(t, err)
	srv.HangAfterCommit(1)
	rs, err := e.Attempts.Execute(ctx, *tr.CurrentAttemptID)
	require.NoError(t, err)
	a := rs.Attempt
	t.Logf("after submit: %s provider_id=%q", a.Status, a.ProviderID)
	require.True(t, a.Status.Open())
	require.Empty(t, a.ProviderID, "the submit's answer was lost: saldo does not know the endToEndId")
	held := merchantBalances(t, pool)

	require.NoError(t, srv.SettleSend(a.Reference, true))
	_, err = srv.ReturnSend(a.Reference, "10.00")
	require.NoError(t, err)
	body, err := srv.ReturnNotice(a.Reference)
	require.NoError(t, err)
	code, ack := pixPost(t, hs.URL, string(body))
	require.Equal(t, http.StatusOK, code, "%v", ack)

	// Read the send's endToEndId from the notice.
	e2e := string(body)[strings.Index(string(body), `"endToEndId":"`)+len(`"endToEndId":"`):]
	e2e = e2e[:32]
	// A stale EM_PROCESSAMENTO notice, delivered late, names it.
	code, ack = pixPost(t, hs.URL, `{"pix":[{"endToEndId":"`+e2e+`","valor":"30.00","status":"EM_PROCESSAMENTO",`+
		`"horario":{"solicitacao":"`+now+`"},"gnExtras":{"idEnvio":"`+a.Reference+`"}}]}`)
	require.Equal(t, http.StatusOK, code, "%v", ack)
	mid, err := e.Attempts.Get(ctx, pool, a.ID)
	require.NoError(t, err)
	t.Logf("after processing notice: %s provider_id=%q", mid.Status, mid.ProviderID)

	// A second, partial return.
	_, err = srv.ReturnSend(a.Reference, "5.00")
	require.NoError(t, err)
	body, err = srv.ReturnNotice(a.Reference)
	require.NoError(t, err)
	code, ack = pixPost(t, hs.URL, string(body))
	require.Equal(t, http.StatusOK, code, "%v", ack)

	got, err := e.Attempts.Get(ctx, pool, a.ID)
	require.NoError(t, err)
	after := merchantBalances(t, pool)
	require.NotEqual(t, attempts.StatusFailed, got.Status, "a returned send settled: a return never fails it")
	require.Equal(t, held[0], after[0], "a partial return must not release the whole reserve to the merchant")
}

// R9, R17: both events of one return are applied or refused together.
// Before, a return whose motivo held \u0000 had its "failed" event refused
// (not Storable) and its "settled" event applied: the open send settled
// and the return was never a divergence (found by review).
func TestPixReturnWithAnUnstorableMotivoIsRefusedWhole_R9_R17(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, _, pool := newPixEngine(t)
	hs := pixAPI(t, e, pool)
	brl := func(s string) money.Amount { return money.MustParse(s, "BRL") }
	now := time.Now().UTC().Format(time.RFC3339Nano)

	tr, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpPixTransfer,
		Amount: brl("20.00"), Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "ana@example.com"}}})
	require.NoError(t, err)
	rs, err := e.Attempts.Execute(ctx, *tr.CurrentAttemptID)
	require.NoError(t, err)
	a := rs.Attempt
	require.NotEmpty(t, a.ProviderID)

	body := `{"pix":[{"endToEndId":"` + a.ProviderID + `","valor":"20.00","horario":"` + now + `",` +
		`"devolucoes":[{"id":"R1","rtrId":"` + reviewRtr1 + `","valor":"20.00","status":"DEVOLVIDO","motivo":"conta\u0000encerrada",` +
		`"horario":{"liquidacao":"` + now + `"}}]}]}`
	code, ack := pixPost(t, hs.URL, body)
	t.Logf("%d %v", code, ack)

	got, err := e.Attempts.Get(ctx, pool, a.ID)
	require.NoError(t, err)
	if got.Status == attempts.StatusSucceeded {
		require.NotNil(t, got.DivergedAt, "the send was settled by the return's first event, but its return (the second) was dropped: half an item applied")
	}
}

// The "refused" list of the answer (and the ERROR log line, and a 400's
// detail) is bounded. Before, the reason was the JSON decoder's error
// verbatim: a time.Time ParseError quotes the whole offending value
// (twice), so an item with a 200 KB horario made a ~400 KB "refused" entry
// echoed back and logged (found by review).
func TestPixRefusedItemReasonsAreBounded(t *testing.T) {
	t.Parallel()
	e, _, pool := newPixEngine(t)
	hs := pixAPI(t, e, pool)
	big := strings.Repeat("A", 200_000)
	body := `{"pix":[{"endToEndId":"E12345678202612051200aaaaaaaaaaa","txid":"x","valor":"1.00","horario":"` + big + `"},` +
		`{"endToEndId":"E12345678202612051200bbbbbbbbbbb","txid":"nope","valor":"1.00","horario":"2026-12-05T12:00:00Z"}]}`
	res, err := http.Post(hs.URL+"/v1/webhooks/pix?hmac=w3bh00k", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer res.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(res.Body)
	t.Logf("status %d, answer of %d bytes", res.StatusCode, buf.Len())
	require.Less(t, buf.Len(), 4096, "the refused list echoes the attacker's text unbounded")
}

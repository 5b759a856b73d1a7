package engine_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
)

// The PSP's notice that a cob was paid, and then that part of it was
// returned (DEVOLVIDO), may each arrive while saldo's PUT for that cob /
// devolucao is still on the wire (the PSP committed it and has not
// answered). The webhook resolves the attempt; the call's late end
// (unknown) changes nothing; the charge is credited once, the refund
// debited once, and the books balance. Nothing went wrong here before: the
// race was exercised by review and held, and this test keeps it covered.
func TestPixWebhooksDuringTheCallCreditAndSettleOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, srv, pool := newPixEngine(t)
	hs := pixAPI(t, e, pool)
	post := func(body string) int {
		r, err := http.Post(hs.URL+"/v1/webhooks/pix?hmac=w3bh00k&ignorar=/pix", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		r.Body.Close()
		return r.StatusCode
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)

	ch, err := e.Charges.Create(ctx, charges.ChargeRequest{MerchantID: "m1", Kind: charges.KindPix, Amount: money.MustParse("30.00", "BRL")})
	require.NoError(t, err)
	a, err := e.Attempts.Get(ctx, pool, *ch.AttemptID)
	require.NoError(t, err)
	srv.HangAfterCommit(1)
	done := make(chan attempts.ExecuteResult, 1)
	go func() {
		res, err := e.Attempts.Execute(ctx, a.ID)
		require.NoError(t, err)
		done <- res
	}()
	require.Eventually(t, func() bool { return srv.CobStatus(a.Reference) == "ATIVA" }, 30*time.Second, time.Millisecond)
	e2e, err := srv.PayCob(a.Reference)
	require.NoError(t, err)
	paid := `{"endToEndId":"` + e2e + `","txid":"` + a.Reference + `","valor":"30.00","horario":"` + now + `"}`
	require.Equal(t, http.StatusOK, post(`{"pix":[`+paid+`]}`))
	res := <-done
	t.Logf("cob attempt after the call ended: %s", res.Attempt.Status)
	got, err := e.Attempts.Get(ctx, pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, got.Status)
	c, err := e.Charges.Get(ctx, "m1", ch.ID)
	require.NoError(t, err)
	require.Equal(t, charges.StatusPaid, c.Status)

	rf, err := e.Payouts.CreateRefund(ctx, payouts.RefundRequest{MerchantID: "m1", ChargeID: ch.ID, Amount: money.MustParse("10.00", "BRL")})
	require.NoError(t, err)
	ra, err := e.Attempts.Get(ctx, pool, *rf.CurrentAttemptID)
	require.NoError(t, err)
	srv.HangAfterCommit(1)
	done = make(chan attempts.ExecuteResult, 1)
	go func() {
		res, err := e.Attempts.Execute(ctx, ra.ID)
		require.NoError(t, err)
		done <- res
	}()
	require.Eventually(t, func() bool { return srv.RefundStatus(ra.Reference) != "" }, 30*time.Second, time.Millisecond)
	require.NoError(t, srv.SettleRefund(ra.Reference, true))
	withRefund := strings.TrimSuffix(paid, "}") + `,"devolucoes":[{"id":"` + ra.Reference + `","rtrId":"D09089356202612051000aaaaaaaaaaa","valor":"10.00","horario":{"solicitacao":"` + now + `","liquidacao":"` + now + `"},"status":"DEVOLVIDO"}]}`
	require.Equal(t, http.StatusOK, post(`{"pix":[`+withRefund+`]}`))
	<-done
	got, err = e.Attempts.Get(ctx, pool, ra.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, got.Status)
	v, err := e.Payouts.Get(ctx, "m1", rf.ID)
	require.NoError(t, err)
	require.Equal(t, payouts.StatusSucceeded, v.Status)
	require.Equal(t, 1, srv.Count(http.MethodPut, "/api/v2/pix/"+e2e+"/devolucao/"+ra.Reference))

	ar, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, ar.OK(), ar.Summary())
}

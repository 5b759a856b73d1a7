package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/audit"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
)

// pixPost POSTs a Pix notice to the real webhook route with the right
// secret and returns the status and the decoded answer.
func pixPost(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	res, err := http.Post(url+"/v1/webhooks/pix?hmac=w3bh00k&ignorar=/pix", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	t.Logf("webhook: %d %.600s", res.StatusCode, b)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return res.StatusCode, m
}

// merchantBalances is m1's available and reserved BRL.
func merchantBalances(t *testing.T, pool *pgxpool.Pool) [2]string {
	t.Helper()
	ctx := context.Background()
	var out [2]string
	for i, spec := range []ledger.AccountSpec{ledger.MerchantAvailable("m1", money.BRL), ledger.MerchantReserved("m1", money.BRL)} {
		b, err := ledger.Balance(ctx, pool, spec.Code())
		if errors.Is(err, ledger.ErrAccountNotFound) {
			out[i] = "0.00 BRL" // made at the first posting
			continue
		}
		require.NoError(t, err)
		out[i] = b.String()
	}
	return out
}

// R17: a PSP groups several Pix in one POST. One malformed item (here a
// send REALIZADO without a valor, and a received Pix whose endToEndId is
// not the BCB's shape naming another open cob) is refused on its own: the
// good item (a cob paid) is applied, the POST is answered 200 naming the
// refused items (the PSP would redeliver the same bad items on a non-2xx),
// the refused items move nothing and their ids never become provider ids.
// A redelivery changes nothing more. Before, the whole POST was 400 and the
// paid cob waited for the poll.
func TestPixNoticeWithOneBadItemAppliesTheOthers_R17(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, srv, pool := newPixEngine(t)
	hs := pixAPI(t, e, pool)
	brl := func(s string) money.Amount { return money.MustParse(s, "BRL") }
	now := time.Now().UTC().Format(time.RFC3339Nano)

	// A cob, paid at the PSP.
	ch, err := e.Charges.Create(ctx, charges.ChargeRequest{MerchantID: "m1", Kind: charges.KindPix, Amount: brl("30.00")})
	require.NoError(t, err)
	ra, err := e.Attempts.Execute(ctx, *ch.AttemptID)
	require.NoError(t, err)
	e2e, err := srv.PayCob(ra.Attempt.Reference)
	require.NoError(t, err)
	// Another cob, open.
	other, err := e.Charges.Create(ctx, charges.ChargeRequest{MerchantID: "m1", Kind: charges.KindPix, Amount: brl("12.00")})
	require.NoError(t, err)
	ro, err := e.Attempts.Execute(ctx, *other.AttemptID)
	require.NoError(t, err)
	// A send, processing at the PSP.
	tr, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpPixTransfer,
		Amount: brl("8.00"), Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "ana@example.com"}}})
	require.NoError(t, err)
	rs, err := e.Attempts.Execute(ctx, *tr.CurrentAttemptID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusPending, rs.Attempt.Status)

	const badE2E = "E12345678202009091221kkkkkkkkkk-"
	body := `{"pix":[` +
		`{"endToEndId":"` + rs.Attempt.ProviderID + `","horario":"` + now + `","status":"REALIZADO","tipo":"SOLICITACAO",` +
		`"gnExtras":{"idEnvio":"` + rs.Attempt.Reference + `"}},` +
		`{"endToEndId":"` + badE2E + `","txid":"` + ro.Attempt.Reference + `","valor":"12.00","horario":"` + now + `"},` +
		`{"endToEndId":"` + e2e + `","txid":"` + ra.Attempt.Reference + `","valor":"30.00","horario":"` + now + `"}]}`
	for delivery := 1; delivery <= 2; delivery++ {
		code, ack := pixPost(t, hs.URL, body)
		require.Equal(t, http.StatusOK, code, "delivery %d: the good item is applied and the POST acknowledged", delivery)
		refused, _ := ack["refused"].([]any)
		require.Len(t, refused, 2, "delivery %d: the answer names the refused items: %v", delivery, ack)
		want := api.WebhookHandled
		if delivery == 2 {
			want = api.WebhookDuplicate
		}
		require.Equal(t, want, ack["outcome"])
		require.Equal(t, "pix:"+e2e+":"+ra.Attempt.Reference, ack["event_id"])
	}

	c, err := e.Charges.Get(ctx, "m1", ch.ID)
	require.NoError(t, err)
	require.Equal(t, charges.StatusPaid, c.Status, "the good item in the POST paid its charge")
	require.Equal(t, e2e, c.ProviderID)
	gs, err := e.Attempts.Get(ctx, pool, rs.Attempt.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusPending, gs.Status, "a send REALIZADO without valor moved nothing (R17)")
	v, err := e.Payouts.Get(ctx, "m1", tr.ID)
	require.NoError(t, err)
	require.Equal(t, payouts.StatusProcessing, v.Status)
	gotOther, err := e.Attempts.Get(ctx, pool, ro.Attempt.ID)
	require.NoError(t, err)
	require.True(t, gotOther.Status.Open(), "an endToEndId not of the BCB's shape paid nothing")
	require.Empty(t, gotOther.ProviderID, "and never became a provider id")

	// A POST whose only item is refused is still 400: nothing in it was usable.
	code, ack := pixPost(t, hs.URL, `{"pix":[{"endToEndId":"`+badE2E+`","txid":"`+ro.Attempt.Reference+`","valor":"12.00","horario":"`+now+`"}]}`)
	require.Equal(t, http.StatusBadRequest, code, "%v", ack)

	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
}

// R17, R9: a received Pix's notice is deduplicated by its endToEndId AND
// its txid. A notice repeating an endToEndId already credited to charge A
// but naming charge B's txid (a PSP's bug, or a forgery with a valid
// secret) contradicts what was recorded: before, its event id
// ("pix:<e2e>") was A's, so it was dropped as a duplicate, silently, and B
// was never looked at by a human. Now it reaches the attempts core, which
// finds A holding that endToEndId: B goes to review, nothing is credited
// twice, and the webhook says "review". Its redelivery is a duplicate of
// itself.
func TestPixNoticeRepeatingAnEndToEndIDForAnotherTxidGoesToReview_R9_R17(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, srv, pool := newPixEngine(t)
	hs := pixAPI(t, e, pool)
	brl := func(s string) money.Amount { return money.MustParse(s, "BRL") }
	now := time.Now().UTC().Format(time.RFC3339Nano)
	open := func() (charges.Charge, attempts.Attempt) {
		t.Helper()
		ch, err := e.Charges.Create(ctx, charges.ChargeRequest{MerchantID: "m1", Kind: charges.KindPix, Amount: brl("30.00")})
		require.NoError(t, err)
		r, err := e.Attempts.Execute(ctx, *ch.AttemptID)
		require.NoError(t, err)
		return ch, r.Attempt
	}
	notice := func(e2e, txid string) string {
		return `{"pix":[{"endToEndId":"` + e2e + `","txid":"` + txid + `","valor":"30.00","horario":"` + now + `"}]}`
	}

	chA, a := open()
	e2eA, err := srv.PayCob(a.Reference)
	require.NoError(t, err)
	code, ack := pixPost(t, hs.URL, notice(e2eA, a.Reference))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, api.WebhookHandled, ack["outcome"])
	before := merchantBalances(t, pool)

	chB, b := open()
	for delivery := 1; delivery <= 2; delivery++ {
		code, ack = pixPost(t, hs.URL, notice(e2eA, b.Reference))
		require.Equal(t, http.StatusOK, code)
		want := api.WebhookReview
		if delivery == 2 {
			want = api.WebhookDuplicate
		}
		require.Equal(t, want, ack["outcome"], "delivery %d: a repeated endToEndId naming another txid is not A's duplicate", delivery)
	}
	gb, err := e.Attempts.Get(ctx, pool, b.ID)
	require.NoError(t, err)
	require.True(t, gb.Review, "B is in front of a human: the PSP named A's endToEndId for B's txid")
	require.True(t, gb.Status.Open(), "B is not paid by A's Pix")
	require.Empty(t, gb.ProviderID)
	cb, err := e.Charges.Get(ctx, "m1", chB.ID)
	require.NoError(t, err)
	require.NotEqual(t, charges.StatusPaid, cb.Status)
	ca, err := e.Charges.Get(ctx, "m1", chA.ID)
	require.NoError(t, err)
	require.Equal(t, charges.StatusPaid, ca.Status)
	require.Equal(t, e2eA, ca.ProviderID)
	require.Equal(t, before, merchantBalances(t, pool), "nothing credited twice")

	// Charge C, already paid by its own Pix, then named with A's
	// endToEndId: a report naming, for C's txid, an operation attempt A
	// holds. It credits nothing and changes neither charge, but it is in
	// front of a human as B's is (R9, R17, R19): C's succeeded attempt
	// diverges (second_operation; the divergence names A's attempt), is in
	// the review queue, and the webhook says "review". Before, it was only
	// a note (secondOperation did not ask whether another attempt holds
	// the endToEndId, nor asked anyone to act).
	chC, c := open()
	e2eC, err := srv.PayCob(c.Reference)
	require.NoError(t, err)
	code, _ = pixPost(t, hs.URL, notice(e2eC, c.Reference))
	require.Equal(t, http.StatusOK, code)
	paid := merchantBalances(t, pool)
	code, ack = pixPost(t, hs.URL, notice(e2eA, c.Reference))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, api.WebhookReview, ack["outcome"], "not dropped as A's duplicate, not only noted")
	gc, err := e.Attempts.Get(ctx, pool, c.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, gc.Status)
	require.Equal(t, e2eC, gc.ProviderID)
	require.NotNil(t, gc.DivergedAt, "C is in front of a human")
	require.True(t, gc.Review)
	require.Contains(t, gc.Divergence, a.ID.String(), "the divergence names the attempt that holds the endToEndId")
	q, _, err := e.Attempts.ReviewQueue(ctx, pool, attempts.ReviewQueueParams{})
	require.NoError(t, err)
	inQueue := map[string]bool{}
	for _, x := range q {
		inQueue[x.ID.String()] = true
	}
	require.True(t, inQueue[c.ID.String()], "C is in the review queue")
	ga, err := e.Attempts.Get(ctx, pool, a.ID)
	require.NoError(t, err)
	require.Nil(t, ga.DivergedAt, "A, whose endToEndId it is, is not touched")
	cc, err := e.Charges.Get(ctx, "m1", chC.ID)
	require.NoError(t, err)
	require.Equal(t, e2eC, cc.ProviderID)
	require.True(t, cc.NeedsAttention)
	require.Equal(t, paid, merchantBalances(t, pool), "nothing credited twice")

	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.False(t, res.OK(), "the audit reports C's divergence until an operator settles it")
	_, err = e.Attempts.SettleDivergence(ctx, c.ID, "op-1", "PSP notice misrouted: A's Pix named with C's txid; nothing to return", attempts.HoldBook)
	require.NoError(t, err)
	res, err = audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
}

// R9, R19: a Pix we sent and marked paid, returned by the receiver's bank
// (a devolucao DEVOLVIDO of our send), notified in the BCB's shape (the Pix
// named by its endToEndId, its devolucoes; no idEnvio) through the real
// webhook route: the succeeded attempt diverges as a reversal, as saldo
// does for every provider failure after success: its status stays
// succeeded, the ledger does not move, the attempt is in review, the
// payout needs_attention, payout.diverged tells the merchant with
// divergence_kind "reversal", and the audit fails until an operator books
// the return and settles it. A redelivery is a duplicate. Before, the
// notice was ignored (unmatched) and only reconciliation would find it.
//
// A second send, a bank payout whose REALIZADO notice never came (still
// open at saldo), returned in part: the return implies the send settled
// (a Pix is returned only once settled), so the payout succeeds with its
// reserve paid out (money left) and then diverges; the partial return
// never releases the whole reserve.
func TestPixSendReturnedByTheReceiverIsAReversal_R9_R19(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, srv, pool := newPixEngine(t)
	hs := pixAPI(t, e, pool)
	brl := func(s string) money.Amount { return money.MustParse(s, "BRL") }
	// An endpoint of m1's, so that its notifications are recorded.
	_, err := pool.Exec(ctx, `INSERT INTO notification_endpoints (id, merchant_id, url, secret, created_at)
		VALUES ('we_00000000000000000000000000000001', 'm1', 'http://127.0.0.1:9/hook', 'whsec', now())`)
	require.NoError(t, err)

	tr, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpPixTransfer,
		Amount: brl("25.00"), Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "ana@example.com"}}})
	require.NoError(t, err)
	rs, err := e.Attempts.Execute(ctx, *tr.CurrentAttemptID)
	require.NoError(t, err)
	a := rs.Attempt
	require.NoError(t, srv.SettleSend(a.Reference, true))
	time.Sleep(2 * time.Millisecond)
	rr, err := e.Attempts.Resolve(ctx, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, rr.Attempt.Status)
	before := merchantBalances(t, pool)

	_, err = srv.ReturnSend(a.Reference, "25.00")
	require.NoError(t, err)
	body, err := srv.ReturnNotice(a.Reference)
	require.NoError(t, err)
	code, ack := pixPost(t, hs.URL, string(body))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, ack["event_id"], "envio-devolucao:"+a.ProviderID)

	got, err := e.Attempts.Get(ctx, pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, got.Status, "finals never change (R9)")
	require.NotNil(t, got.DivergedAt, "the return is a divergence on the succeeded attempt")
	require.Contains(t, got.Divergence, "reversal")
	require.True(t, got.Review)
	require.Equal(t, before, merchantBalances(t, pool), "the ledger is not moved automatically")
	v, err := e.Payouts.Get(ctx, "m1", tr.ID)
	require.NoError(t, err)
	require.Equal(t, payouts.StatusSucceeded, v.Status)
	require.True(t, v.NeedsAttention)
	var data []byte
	require.NoError(t, pool.QueryRow(ctx, `SELECT payload FROM notification_events
		WHERE object_id = $1 AND type = 'payout.diverged'`, tr.ID).Scan(&data))
	var n map[string]any
	require.NoError(t, json.Unmarshal(data, &n))
	require.Equal(t, api.DivergenceReversal, n["data"].(map[string]any)["divergence_kind"], string(data))

	code, ack = pixPost(t, hs.URL, string(body))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, api.WebhookDuplicate, ack["outcome"])
	again, err := e.Attempts.Get(ctx, pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, got.DivergedAt, again.DivergedAt)

	// A bank payout sent, settled at the PSP, its REALIZADO notice lost;
	// the receiver's bank returns 10.00 of 40.00.
	bp, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpBankPayout,
		Amount: brl("40.00"), Destination: &providers.Destination{BankAccount: &providers.BankAccount{ISPB: "60701190",
			Branch: "0001", Account: "12345-6", Type: "checking"}, HolderName: "Maria da Silva", HolderTaxID: "12345678909"}})
	require.NoError(t, err)
	rb, err := e.Attempts.Execute(ctx, *bp.CurrentAttemptID)
	require.NoError(t, err)
	b := rb.Attempt
	require.Equal(t, attempts.StatusPending, b.Status)
	require.NotEmpty(t, b.ProviderID)
	held := merchantBalances(t, pool)
	require.NoError(t, srv.SettleSend(b.Reference, true))
	_, err = srv.ReturnSend(b.Reference, "10.00")
	require.NoError(t, err)
	body, err = srv.ReturnNotice(b.Reference)
	require.NoError(t, err)
	code, _ = pixPost(t, hs.URL, string(body))
	require.Equal(t, http.StatusOK, code)
	gb, err := e.Attempts.Get(ctx, pool, b.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, gb.Status, "the return implies the send settled: the money left")
	require.NotNil(t, gb.DivergedAt, "and its return is a reversal for a human")
	require.Equal(t, held[0], merchantBalances(t, pool)[0], "the partial return released nothing to the merchant")
	require.Equal(t, "0.00 BRL", merchantBalances(t, pool)[1], "the reserve was paid out, not released")

	res, err := audit.Run(ctx, pool)
	require.NoError(t, err)
	require.False(t, res.OK(), "audit verify reports the unsettled reversals")
	require.Contains(t, res.Summary(), "diverged")
	for _, id := range []attempts.Attempt{a, b} {
		_, err = e.Attempts.SettleDivergence(ctx, id.ID, "op-1", "returned by the receiver's bank; merchant re-credited by funding", attempts.HoldBook)
		require.NoError(t, err)
	}
	res, err = audit.Run(ctx, pool)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Summary())
}

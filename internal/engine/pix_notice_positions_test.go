package engine_test

import (
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

// R17: the answer's "refused" names each refused item by its position in
// the notice's pix array (and in its devolucoes), as the sender wrote it.
// Before, an item the parser passed but PostgreSQL could not store (a
// txid, a devolucao id holding \u0000) was refused by the webhook route,
// labelled by a count of the events parsed so far ("event 2"): an item
// that gives no event (a Pix to the key without a txid) or two (a returned
// send: settled, then returned; and these are sorted first) shifted it,
// so the label named another item.
func TestPixNoticeRefusedItemsAreNamedByTheirArrayPosition_R17(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, _, pool := newPixEngine(t)
	hs := pixAPI(t, e, pool)
	now := time.Now().UTC().Format(time.RFC3339Nano)

	tr, err := e.Payouts.CreatePayout(ctx, payouts.PayoutRequest{MerchantID: "m1", Operation: providers.OpPixTransfer,
		Amount: money.MustParse("20.00", "BRL"), Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "ana@example.com"}}})
	require.NoError(t, err)
	rs, err := e.Attempts.Execute(ctx, *tr.CurrentAttemptID)
	require.NoError(t, err)
	a := rs.Attempt
	require.NotEmpty(t, a.ProviderID)

	body := `{"pix":[` +
		// 0: a Pix to the key without a txid: no event.
		`{"endToEndId":"E0000000020200909122100000000001","valor":"1.00","horario":"` + now + `"},` +
		// 1: our send, returned by the receiver (BCB shape): two events.
		`{"endToEndId":"` + a.ProviderID + `","valor":"20.00","horario":"` + now + `",` +
		`"devolucoes":[{"id":"R1","rtrId":"` + reviewRtr1 + `","valor":"20.00","status":"DEVOLVIDO","horario":{"liquidacao":"` + now + `"}}]},` +
		// 2: a received Pix whose txid PostgreSQL cannot store.
		`{"endToEndId":"E12345678202612051200ccccccccccc","txid":"bad\u0000txid","valor":"5.00","horario":"` + now + `"},` +
		// 3: a devolucao (second of its item) whose id PostgreSQL cannot store.
		`{"endToEndId":"E12345678202612051200ddddddddddd","txid":"goodtxid0000000000000000001","valor":"5.00","horario":"` + now + `",` +
		`"devolucoes":[{"id":"R9","rtrId":"D1234567820261205120000000000009","valor":"1.00","status":"EM_PROCESSAMENTO",` +
		`"horario":{"solicitacao":"` + now + `"}},` +
		`{"id":"R\u00000","rtrId":"D1234567820261205120000000000008","valor":"1.00","status":"DEVOLVIDO",` +
		`"horario":{"liquidacao":"` + now + `"}}]}]}`
	code, ack := pixPost(t, hs.URL, body)
	require.Equal(t, http.StatusOK, code, "%v", ack)
	refused, _ := ack["refused"].([]any)
	require.Len(t, refused, 2, "%v", ack)
	for i, want := range []string{"pix[2] ", "pix[3].devolucoes[1] "} {
		s, _ := refused[i].(string)
		require.True(t, strings.HasPrefix(s, want), "refused %d is %q: it must name %s", i, s, want)
	}

	got, err := e.Attempts.Get(ctx, pool, a.ID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusSucceeded, got.Status, "the returned send's events were applied")
	require.NotNil(t, got.DivergedAt, "and its return is a reversal for a human (R19)")
}

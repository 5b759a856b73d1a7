package sim_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// Insufficient platform funds is a definitive decline, recorded as a failed
// operation, and the balance never goes negative.
func TestInsufficientFunds(t *testing.T) {
	t.Parallel()
	srv, p := setup(t, sim.Config{Balances: map[string]string{"BRL": "100.00"}})
	ok := open(t, p, payout("60.00")).send(p)
	require.Equal(t, http.StatusOK, ok.Exchange.StatusCode)
	require.Equal(t, "40.00", srv.Balance("BRL"))

	a := open(t, p, transfer("60.00"))
	res := a.send(p)
	require.Equal(t, http.StatusUnprocessableEntity, res.Exchange.StatusCode)
	require.Equal(t, providers.RefineDeclined, res.Refinement)
	require.Equal(t, providers.StateFailed, res.State)
	require.Equal(t, "insufficient_funds", res.FailureCode)
	require.NotEmpty(t, res.ProviderID)
	ops := srv.Operations(a.ref)
	require.Len(t, ops, 1)
	require.Equal(t, providers.StateFailed, ops[0].State)
	require.Equal(t, "40.00", srv.Balance("BRL"))

	// The decline is stored under the key (R7: a new attempt needs a new key).
	require.Equal(t, http.StatusUnprocessableEntity, a.send(p).Exchange.StatusCode)
	require.Len(t, srv.Operations(a.ref), 1)

	// A non-nil Balances map gives zero to currencies it does not name.
	require.Equal(t, "0.00", srv.Balance("USD"))
}

func TestDestinationDeclines(t *testing.T) {
	t.Parallel()
	_, p := setup(t, sim.Config{})
	in := transfer("1.00")
	in.Destination.PixKey.Value = sim.DeclinedPixKey
	res := open(t, p, in).send(p)
	require.Equal(t, http.StatusUnprocessableEntity, res.Exchange.StatusCode)
	require.Equal(t, "pix_key_not_found", res.FailureCode)
	require.Equal(t, providers.RefineDeclined, res.Refinement)

	po := payout("1.00")
	po.Destination.BankAccount.Account = sim.ClosedAccount
	res = open(t, p, po).send(p)
	require.Equal(t, "account_closed", res.FailureCode)
	require.Equal(t, providers.StateFailed, res.State)
}

func TestCardDeclines(t *testing.T) {
	t.Parallel()
	srv, p := setup(t, sim.Config{Balances: map[string]string{"BRL": "0"}})
	for token, code := range map[string]string{
		sim.TokenDecline: "generic_decline", sim.TokenInsufficient: "insufficient_funds", sim.TokenExpired: "expired_card",
	} {
		a := open(t, p, cardCharge("10.00", token))
		res := a.send(p)
		require.Equal(t, http.StatusPaymentRequired, res.Exchange.StatusCode, token)
		require.Equal(t, providers.RefineDeclined, res.Refinement, token)
		require.Equal(t, providers.StateFailed, res.State, token)
		require.Equal(t, code, res.FailureCode, token)
		require.Len(t, srv.Operations(a.ref), 1)
	}
	ok := open(t, p, cardCharge("10.00", "tok_visa")).send(p)
	require.Equal(t, providers.StateSucceeded, ok.State)
	require.Equal(t, "10.00", srv.Balance("BRL"), "only the captured charge credits the balance")
}

// Refunds only of charges the sim holds, never more than what is left.
func TestRefundBounds(t *testing.T) {
	t.Parallel()
	srv, p := setup(t, sim.Config{Balances: map[string]string{"BRL": "0"}})
	ch := open(t, p, cardCharge("100.00", "tok_visa"))
	chRes := ch.send(p)
	require.Equal(t, providers.StateSucceeded, chRes.State)

	refund := func(amount, chargeID, chargeRef string) providers.SubmitResult {
		return open(t, p, providers.OperationInput{Operation: providers.OpRefund, Amount: amount, Currency: "BRL",
			ChargeProviderID: chargeID, ChargeReference: chargeRef}).send(p)
	}
	r1 := refund("60.00", chRes.ProviderID, "")
	require.Equal(t, http.StatusOK, r1.Exchange.StatusCode)
	require.JSONEq(t, `{"charge_id":"`+chRes.ProviderID+`","charge_reference":"`+ch.ref+`"}`, string(r1.Data))

	r2 := refund("40.01", chRes.ProviderID, "")
	require.Equal(t, http.StatusBadRequest, r2.Exchange.StatusCode)
	require.Equal(t, "amount_too_large", r2.FailureCode)

	r3 := refund("40.00", "", ch.ref) // by the charge's reference
	require.Equal(t, http.StatusOK, r3.Exchange.StatusCode)
	require.Equal(t, "0.00", srv.Balance("BRL"))

	r4 := refund("0.01", chRes.ProviderID, "")
	require.Equal(t, http.StatusBadRequest, r4.Exchange.StatusCode)

	require.Equal(t, http.StatusNotFound, refund("1.00", "op_nope", "").Exchange.StatusCode)
	require.Equal(t, http.StatusNotFound, refund("1.00", "", newRef()).Exchange.StatusCode)
	require.Equal(t, http.StatusBadRequest, refund("1.00", chRes.ProviderID, newRef()).Exchange.StatusCode)

	// A declined charge cannot be refunded; a transfer is not a charge.
	dec := open(t, p, cardCharge("5.00", sim.TokenDecline)).send(p)
	require.Equal(t, http.StatusBadRequest, refund("1.00", dec.ProviderID, "").Exchange.StatusCode)

	var charge []sim.Operation = srv.Operations(ch.ref)
	require.Equal(t, "100.00", charge[0].AmountRefunded)

	// Currency must match.
	usd := open(t, p, providers.OperationInput{Operation: providers.OpCardCharge, Amount: "10.00", Currency: "USD",
		CardToken: "tok_visa"}).send(p)
	bad := open(t, p, providers.OperationInput{Operation: providers.OpRefund, Amount: "1.00", Currency: "BRL",
		ChargeProviderID: usd.ProviderID}).send(p)
	require.Equal(t, http.StatusBadRequest, bad.Exchange.StatusCode)
	require.Empty(t, srv.Duplicates())
}

func cob(expires time.Duration) providers.OperationInput {
	return providers.OperationInput{Operation: providers.OpPixCharge, Amount: "25.50", Currency: "BRL",
		ExpiresIn: expires, PayerName: "Ana", PayerTaxID: "12345678909", Description: "pedido 42"}
}

func pay(t *testing.T, srv *sim.Server, txid string) int {
	t.Helper()
	resp, err := http.Post(srv.URL()+"/sim/cobs/"+txid+"/pay", "application/json", strings.NewReader(`{"name":"Bia"}`))
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// A cob is created (submit "succeeded"), active until paid (lookup
// processing), paid by the payer endpoint (lookup succeeded, webhook),
// and refundable once paid.
func TestCobPaid(t *testing.T) {
	t.Parallel()
	clock := sim.NewManualClock(t0)
	rc := newReceiver(t, 0)
	srv, p := setup(t, sim.Config{Clock: clock.Now, WebhookURL: rc.URL, WebhookSecret: "whsec"})
	a := open(t, p, cob(10*time.Minute))
	res := a.send(p)
	require.Equal(t, http.StatusCreated, res.Exchange.StatusCode)
	require.Equal(t, providers.StateSucceeded, res.State, "submit of a pix_charge: the cob was created")
	var c sim.Cob
	require.NoError(t, json.Unmarshal(res.Data, &c))
	require.Equal(t, a.ref, c.TxID)
	require.Equal(t, sim.CobActive, c.Status)
	require.Equal(t, t0.Add(10*time.Minute), c.ExpiresAt)
	require.True(t, strings.HasPrefix(c.CopyPaste, "000201"))
	require.Contains(t, c.CopyPaste, "br.gov.bcb.pix")
	require.Contains(t, c.CopyPaste, "540525.50")
	require.True(t, sim.ValidBRCode(c.CopyPaste))

	lr, err := p.Lookup(context.Background(), providers.OpPixCharge, a.ref)
	require.NoError(t, err)
	require.Equal(t, providers.StateProcessing, lr.State)
	require.Empty(t, srv.Statement(t0), "an active cob is on no statement")

	clock.Advance(time.Minute)
	require.Equal(t, http.StatusOK, pay(t, srv, a.ref))
	require.Equal(t, http.StatusConflict, pay(t, srv, a.ref), "paid once")
	require.Equal(t, http.StatusNotFound, pay(t, srv, newRef()))

	lr, err = p.Lookup(context.Background(), providers.OpPixCharge, a.ref)
	require.NoError(t, err)
	require.Equal(t, providers.StateSucceeded, lr.State)
	require.Equal(t, "25.50", lr.Amount)

	flush(t, srv)
	evs := rc.delivered(t, p, clock.Now())
	require.Len(t, evs, 2)
	require.Equal(t, "pix_charge.processing", evs[0].Type)
	require.Equal(t, "pix_charge.succeeded", evs[1].Type)
	require.Equal(t, a.ref, evs[1].Reference)
	require.Equal(t, providers.StateSucceeded, evs[1].State)

	refund := open(t, p, providers.OperationInput{Operation: providers.OpRefund, Amount: "25.50", Currency: "BRL",
		ChargeReference: a.ref}).send(p)
	require.Equal(t, http.StatusOK, refund.Exchange.StatusCode)
}

// An expired cob cannot be paid and lookups report it failed.
func TestCobExpiry(t *testing.T) {
	t.Parallel()
	clock := sim.NewManualClock(t0)
	srv, p := setup(t, sim.Config{Clock: clock.Now})
	a := open(t, p, cob(0)) // default expiry
	require.Equal(t, http.StatusCreated, a.send(p).Exchange.StatusCode)
	clock.Advance(sim.DefaultCobExpiry)
	require.Equal(t, http.StatusGone, pay(t, srv, a.ref))
	lr, err := p.Lookup(context.Background(), providers.OpPixCharge, a.ref)
	require.NoError(t, err)
	require.Equal(t, providers.StateFailed, lr.State)
	require.Equal(t, "cob_expired", lr.FailureCode)
	_, err = srv.PayCob(a.ref, "", "")
	require.ErrorIs(t, err, sim.ErrCobExpired)
	require.Equal(t, "1000000000.00", srv.Balance("BRL"), "nothing credited")
}

// The txid is unique: another key (or no key) for the same txid is 409
// duplicate, never a second cob.
func TestCobDuplicateTxid(t *testing.T) {
	t.Parallel()
	for _, noKeys := range []bool{false, true} {
		srv, p := setup(t, sim.Config{NoIdempotency: noKeys})
		a := open(t, p, cob(time.Hour))
		require.Equal(t, http.StatusCreated, a.send(p).Exchange.StatusCode)
		b := a
		b.key = "another"
		res := b.send(p)
		require.Equal(t, http.StatusConflict, res.Exchange.StatusCode)
		require.Equal(t, providers.RefineDuplicate, res.Refinement)
		require.Len(t, srv.Operations(a.ref), 1)
	}
}

// The oracle lists every operation for a reference, keys included, over HTTP
// and in Go.
func TestOracle(t *testing.T) {
	t.Parallel()
	clock := sim.NewManualClock(t0)
	srv, p := setup(t, sim.Config{Clock: clock.Now, KeyLifetime: time.Minute, LookupLag: time.Hour})
	a := open(t, p, transfer("7.00"))
	a.send(p)
	clock.Advance(time.Minute)
	a.send(p) // key expired: a duplicate

	var body struct {
		Reference   string          `json:"reference"`
		Operations  []sim.Operation `json:"operations"`
		MoneyMoving int             `json:"money_moving"`
	}
	require.Equal(t, http.StatusOK, getJSON(t, srv.URL()+"/sim/oracle/"+a.ref, &body))
	require.Equal(t, a.ref, body.Reference)
	require.Len(t, body.Operations, 2, "no lookup lag in the oracle")
	require.Equal(t, 2, body.MoneyMoving)
	require.Equal(t, a.key, body.Operations[0].IdempotencyKey)
	require.Equal(t, "7.00", body.Operations[1].Amount)

	var dups struct {
		References []string `json:"references"`
	}
	getJSON(t, srv.URL()+"/sim/duplicates", &dups)
	require.Equal(t, []string{a.ref}, dups.References)

	var empty struct {
		Operations []sim.Operation `json:"operations"`
	}
	getJSON(t, srv.URL()+"/sim/oracle/"+newRef(), &empty)
	require.Empty(t, empty.Operations)

	var balances map[string]string
	getJSON(t, srv.URL()+"/sim/balances", &balances)
	require.Equal(t, "999999986.00", balances["BRL"])
}

// Statements list what reached a final state on a UTC day.
func TestStatement(t *testing.T) {
	t.Parallel()
	clock := sim.NewManualClock(time.Date(2026, 12, 2, 23, 0, 0, 0, time.UTC))
	srv, p := setup(t, sim.Config{Clock: clock.Now})
	tr := open(t, p, transfer("10.00"))
	trRes := tr.send(p)
	dec := open(t, p, cardCharge("3.00", sim.TokenDecline))
	dec.send(p)
	c := open(t, p, cob(3*time.Hour))
	c.send(p)
	clock.Advance(2 * time.Hour) // next day
	_, err := srv.PayCob(c.ref, "", "")
	require.NoError(t, err)

	day1, err := p.Statement(context.Background(), time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC))
	require.NoError(t, err)
	require.Len(t, day1, 2)
	byRef := map[string]providers.StatementEntry{}
	for _, e := range day1 {
		byRef[e.Reference] = e
	}
	require.Equal(t, trRes.ProviderID, byRef[tr.ref].ProviderID)
	require.Equal(t, providers.StateSucceeded, byRef[tr.ref].State)
	require.Equal(t, "10.00", byRef[tr.ref].Amount)
	require.Equal(t, providers.StateFailed, byRef[dec.ref].State)

	day2, err := p.Statement(context.Background(), clock.Now())
	require.NoError(t, err)
	require.Len(t, day2, 1)
	require.Equal(t, c.ref, day2[0].Reference)
	require.Equal(t, providers.OpPixCharge, day2[0].Operation)
	require.Equal(t, clock.Now(), day2[0].At)
}

func TestCapabilities(t *testing.T) {
	t.Parallel()
	cfg := sim.Config{KeyLifetime: 2 * time.Hour, LookupLag: 10 * time.Second, ConsistencyWindow: 5 * time.Second,
		WebhookURL: "http://127.0.0.1:1/hook"}
	srv, p := setup(t, cfg)
	caps := p.Capabilities()
	require.True(t, caps.IdempotencyKeys)
	require.Equal(t, 2*time.Hour, caps.KeyLifetime)
	require.Equal(t, 10*time.Second, caps.ConsistencyWindow, "never below the lookup lag")
	require.True(t, caps.Webhooks)
	require.True(t, caps.Statements)
	for _, op := range []providers.Operation{providers.OpPixTransfer, providers.OpBankPayout, providers.OpRefund,
		providers.OpCardCharge, providers.OpPixCharge} {
		require.True(t, caps.Supports(op), op)
	}
	fetched, err := sim.FetchCapabilities(context.Background(), srv.URL(), fastHTTP)
	require.NoError(t, err)
	require.Equal(t, caps, fetched)
	require.Equal(t, "sim", p.Name())
	require.Equal(t, "sim-b", sim.NewProvider(srv.URL(), sim.WithName("sim-b")).Name())
}

// Same seed, same requests: same operation ids.
func TestIDsAreDeterministic(t *testing.T) {
	t.Parallel()
	ids := func() []string {
		srv, p := setup(t, sim.Config{Seed: 42})
		var out []string
		for i := range 5 {
			body, err := p.EncodePayload(transfer("1.00"), "r"+string(rune('a'+i)))
			require.NoError(t, err)
			out = append(out, p.Submit(context.Background(), providers.SubmitRequest{Operation: providers.OpPixTransfer,
				Payload: body}).ProviderID)
		}
		_ = srv
		return out
	}
	require.Equal(t, ids(), ids())
}

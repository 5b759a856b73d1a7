package sim_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// Bad input gets the 4xx a PSP gives, with a JSON error, and never crashes
// the server or creates an operation.
func TestBadRequestsGet4xx(t *testing.T) {
	t.Parallel()
	srv, p := setup(t, sim.Config{})
	const pixDest = `"destination":{"pix_key":{"type":"email","value":"a@b.c"}}`
	cases := []struct {
		name, method, path, body string
		header                   map[string]string
		status                   int
	}{
		{"not json", "POST", "/v1/operations", `{`, nil, 400},
		{"empty body", "POST", "/v1/operations", ``, nil, 400},
		{"array", "POST", "/v1/operations", `[]`, nil, 400},
		{"unknown field", "POST", "/v1/operations", `{"operation":"pix_transfer","reference":"r1","amount":"1.00","currency":"BRL",` + pixDest + `,"color":"red"}`, nil, 400},
		{"trailing data", "POST", "/v1/operations", `{"operation":"pix_transfer","reference":"r1","amount":"1.00","currency":"BRL",` + pixDest + `} {}`, nil, 400},
		{"amount as number", "POST", "/v1/operations", `{"operation":"pix_transfer","reference":"r1","amount":1,"currency":"BRL",` + pixDest + `}`, nil, 400},
		{"unknown operation", "POST", "/v1/operations", `{"operation":"teleport","reference":"r1","amount":"1.00","currency":"BRL"}`, nil, 400},
		{"missing reference", "POST", "/v1/operations", `{"operation":"pix_transfer","amount":"1.00","currency":"BRL",` + pixDest + `}`, nil, 400},
		{"reference with dashes", "POST", "/v1/operations", `{"operation":"pix_transfer","reference":"a-b","amount":"1.00","currency":"BRL",` + pixDest + `}`, nil, 400},
		{"negative amount", "POST", "/v1/operations", `{"operation":"pix_transfer","reference":"r1","amount":"-1.00","currency":"BRL",` + pixDest + `}`, nil, 400},
		{"zero amount", "POST", "/v1/operations", `{"operation":"pix_transfer","reference":"r1","amount":"0.00","currency":"BRL",` + pixDest + `}`, nil, 400},
		{"too many decimals", "POST", "/v1/operations", `{"operation":"pix_transfer","reference":"r1","amount":"1.001","currency":"BRL",` + pixDest + `}`, nil, 400},
		{"exponent", "POST", "/v1/operations", `{"operation":"pix_transfer","reference":"r1","amount":"1e3","currency":"BRL",` + pixDest + `}`, nil, 400},
		{"leading zero", "POST", "/v1/operations", `{"operation":"pix_transfer","reference":"r1","amount":"01.00","currency":"BRL",` + pixDest + `}`, nil, 400},
		{"huge amount", "POST", "/v1/operations", `{"operation":"pix_transfer","reference":"r1","amount":"99999999999","currency":"BRL",` + pixDest + `}`, nil, 400},
		{"yen decimals", "POST", "/v1/operations", `{"operation":"card_charge","reference":"r1","amount":"1.5","currency":"JPY","card_token":"tok_visa"}`, nil, 400},
		{"unknown currency", "POST", "/v1/operations", `{"operation":"card_charge","reference":"r1","amount":"1.00","currency":"XYZ","card_token":"tok_visa"}`, nil, 400},
		{"pix in usd", "POST", "/v1/operations", `{"operation":"pix_transfer","reference":"r1","amount":"1.00","currency":"USD",` + pixDest + `}`, nil, 400},
		{"no destination", "POST", "/v1/operations", `{"operation":"pix_transfer","reference":"r1","amount":"1.00","currency":"BRL"}`, nil, 400},
		{"two destinations", "POST", "/v1/operations", `{"operation":"pix_transfer","reference":"r1","amount":"1.00","currency":"BRL","destination":{"pix_key":{"type":"email","value":"a@b.c"},"bank_account":{"ispb":"60701190","branch":"1","account":"1","type":"checking"}}}`, nil, 400},
		{"bad cpf key", "POST", "/v1/operations", `{"operation":"pix_transfer","reference":"r1","amount":"1.00","currency":"BRL","destination":{"pix_key":{"type":"cpf","value":"123"}}}`, nil, 400},
		{"bad key type", "POST", "/v1/operations", `{"operation":"pix_transfer","reference":"r1","amount":"1.00","currency":"BRL","destination":{"pix_key":{"type":"iban","value":"x"}}}`, nil, 400},
		{"payout to pix key", "POST", "/v1/operations", `{"operation":"bank_payout","reference":"r1","amount":"1.00","currency":"BRL",` + pixDest + `}`, nil, 400},
		{"bad ispb", "POST", "/v1/operations", `{"operation":"bank_payout","reference":"r1","amount":"1.00","currency":"BRL","destination":{"bank_account":{"ispb":"123","branch":"1","account":"1","type":"checking"}}}`, nil, 400},
		{"raw card number", "POST", "/v1/operations", `{"operation":"card_charge","reference":"r1","amount":"1.00","currency":"BRL","card_token":"4242424242424242"}`, nil, 400},
		{"no card token", "POST", "/v1/operations", `{"operation":"card_charge","reference":"r1","amount":"1.00","currency":"BRL"}`, nil, 400},
		{"refund without charge", "POST", "/v1/operations", `{"operation":"refund","reference":"r1","amount":"1.00","currency":"BRL"}`, nil, 400},
		{"short txid", "POST", "/v1/operations", `{"operation":"pix_charge","reference":"short","amount":"1.00","currency":"BRL"}`, nil, 400},
		{"negative expiry", "POST", "/v1/operations", `{"operation":"pix_charge","reference":"abcdefghijklmnopqrstuvwxyz01","amount":"1.00","currency":"BRL","expires_in_seconds":-5}`, nil, 400},
		{"card token on transfer", "POST", "/v1/operations", `{"operation":"pix_transfer","reference":"r1","amount":"1.00","currency":"BRL",` + pixDest + `,"card_token":"tok_visa"}`, nil, 400},
		{"long description", "POST", "/v1/operations", `{"operation":"card_charge","reference":"r1","amount":"1.00","currency":"BRL","card_token":"tok_visa","description":"` + strings.Repeat("x", 141) + `"}`, nil, 400},
		{"long key", "POST", "/v1/operations", `{"operation":"card_charge","reference":"r1","amount":"1.00","currency":"BRL","card_token":"tok_visa"}`, map[string]string{"Idempotency-Key": strings.Repeat("k", 256)}, 400},
		{"huge body", "POST", "/v1/operations", `{"description":"` + strings.Repeat("x", 2<<20) + `"}`, nil, 413},
		{"lookup without reference", "GET", "/v1/operations", ``, nil, 400},
		{"lookup bad operation", "GET", "/v1/operations?reference=r1&operation=x", ``, nil, 400},
		{"statement bad date", "GET", "/v1/statements?date=yesterday", ``, nil, 400},
		{"unknown path", "GET", "/v1/nothing", ``, nil, 404},
		{"wrong method", "DELETE", "/v1/operations", ``, nil, 405},
		{"pay unknown cob", "POST", "/sim/cobs/abc/pay", ``, nil, 404},
		{"pay with junk", "POST", "/sim/cobs/abc/pay", `{"x":1}`, nil, 400},
		{"bad fault", "POST", "/sim/faults", `{"kind":"explode"}`, nil, 400},
	}
	for _, tc := range cases {
		req, err := http.NewRequest(tc.method, srv.URL()+tc.path, strings.NewReader(tc.body))
		require.NoError(t, err)
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err, tc.name)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, tc.status, resp.StatusCode, "%s: %s", tc.name, b)
		{
			var eb struct {
				Error struct {
					Type, Code, Message string
				} `json:"error"`
			}
			require.NoError(t, json.Unmarshal(b, &eb), tc.name)
			require.NotEmpty(t, eb.Error.Message, tc.name)
		}
	}
	require.Empty(t, srv.AllOperations())
	// Still serving.
	require.Equal(t, http.StatusOK, open(t, p, transfer("1.00")).send(p).Exchange.StatusCode)
}

// A valid fault posted over the admin endpoint takes effect.
func TestAdminFaultEndpoint(t *testing.T) {
	t.Parallel()
	srv, p := setup(t, sim.Config{})
	a := open(t, p, transfer("1.00"))
	resp, err := http.Post(srv.URL()+"/sim/faults", "application/json",
		bytes.NewBufferString(`{"kind":"unavailable","reference":"`+a.ref+`","nth":1}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, http.StatusServiceUnavailable, a.send(p).Exchange.StatusCode)
	require.Equal(t, http.StatusOK, a.send(p).Exchange.StatusCode)
}

func TestEncodePayload(t *testing.T) {
	t.Parallel()
	p := sim.NewProvider("http://127.0.0.1:1")
	in := transfer("10.50")
	in.Metadata = map[string]string{"z": "1", "a": "2", "m": "3"}
	in.Description = "aluguel"
	b1, err := p.EncodePayload(in, "abc123")
	require.NoError(t, err)
	for range 20 {
		b2, err := p.EncodePayload(in, "abc123")
		require.NoError(t, err)
		require.Equal(t, b1, b2, "deterministic bytes")
	}
	require.JSONEq(t, `{"operation":"pix_transfer","reference":"abc123","amount":"10.50","currency":"BRL",
		"destination":{"pix_key":{"type":"email","value":"ana@example.com"}},"description":"aluguel",
		"metadata":{"a":"2","m":"3","z":"1"}}`, string(b1))
	require.True(t, bytes.Index(b1, []byte(`"a":"2"`)) < bytes.Index(b1, []byte(`"z":"1"`)))

	c := cob(90*time.Second + time.Millisecond)
	b, err := p.EncodePayload(c, "abcdefghijklmnopqrstuvwxyz012345")
	require.NoError(t, err)
	require.Contains(t, string(b), `"expires_in_seconds":91`)
	require.Contains(t, string(b), `"payer":{"name":"Ana","tax_id":"12345678909"}`)

	bad := []struct {
		in  providers.OperationInput
		ref string
		err error
	}{
		{providers.OperationInput{Operation: "teleport"}, "r", providers.ErrUnsupported},
		{transfer("10.50"), "", providers.ErrInvalidInput},
		{transfer("10.5.0"), "r", providers.ErrInvalidInput},
		{transfer("-1"), "r", providers.ErrInvalidInput},
		{providers.OperationInput{Operation: providers.OpPixTransfer, Amount: "1.00", Currency: "BRL"}, "r", providers.ErrInvalidInput},
		{cardCharge("1.00", "4242 4242 4242 4242"), "r", providers.ErrInvalidInput},
		{cob(time.Hour), "tooshort", providers.ErrInvalidInput},
		{cob(-time.Second), "abcdefghijklmnopqrstuvwxyz012345", providers.ErrInvalidInput},
		{func() providers.OperationInput { i := transfer("1.00"); i.ExpiresIn = time.Hour; return i }(), "r", providers.ErrInvalidInput},
	}
	for i, tc := range bad {
		_, err := p.EncodePayload(tc.in, tc.ref)
		require.True(t, errors.Is(err, tc.err), "case %d: %v", i, err)
	}

	limited := sim.NewProvider("http://127.0.0.1:1", sim.WithCapabilities(providers.Capabilities{
		Operations: []providers.Operation{providers.OpCardCharge}}))
	_, err = limited.EncodePayload(transfer("1.00"), "r")
	require.ErrorIs(t, err, providers.ErrUnsupported)
}

// Nothing listening: the exchange says "not sent" (R2), Statement errors.
func TestProviderDown(t *testing.T) {
	t.Parallel()
	srv := sim.NewServer(sim.Config{}).Start()
	url := srv.URL()
	srv.Close()
	p := sim.NewProvider(url, sim.WithHTTPSettings(fastHTTP))
	a := open(t, p, transfer("1.00"))
	res := a.send(p)
	require.Error(t, res.Exchange.Err)
	require.False(t, res.Exchange.Wrote)
	require.False(t, res.Exchange.Connected)
	lr, err := p.Lookup(t.Context(), providers.OpPixTransfer, a.ref)
	require.NoError(t, err)
	require.False(t, lr.Found)
	require.Error(t, lr.Exchange.Err)
	_, err = p.Statement(t.Context(), time.Now())
	require.ErrorIs(t, err, sim.ErrStatement)
}

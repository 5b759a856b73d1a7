package api_test

// Issue 13, "API hardening": each test is a probe a careless or hostile
// client ran against saldo, written down before the fix.

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// raw sends a hand-built request (no Content-Type added, any transfer
// encoding) to the API and validates the answer against docs/openapi.yaml
// like exchange does.
func (e *env) raw(method, path, key string, body io.Reader, chunked bool, header map[string]string) resp {
	e.t.Helper()
	hr, err := http.NewRequestWithContext(e.ctx, method, e.http.URL+path, body)
	require.NoError(e.t, err)
	if chunked {
		hr.TransferEncoding = []string{"chunked"}
		hr.ContentLength = -1
	}
	if key != "" {
		hr.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range header {
		hr.Header.Set(k, v)
	}
	hres, err := http.DefaultClient.Do(hr)
	require.NoError(e.t, err)
	defer hres.Body.Close()
	b, err := io.ReadAll(hres.Body)
	require.NoError(e.t, err)
	return resp{Status: hres.StatusCode, Header: hres.Header, Body: b}
}

func (e *env) countRows(table string) int {
	e.t.Helper()
	var n int
	require.NoError(e.t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM `+table).Scan(&n))
	return n
}

// field is the problem's field ("" when it names none).
func (r resp) field(t *testing.T) string {
	t.Helper()
	f, _ := r.json(t)["field"].(string)
	return f
}

// A NUL in any string field was a 500 (PostgreSQL refuses it): now 400
// naming the field, in bodies, paths and query strings alike.
func TestHardeningNULIs400NamingTheField(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	body := pixBody("1.00")
	body["description"] = "a\x00b"
	r := e.post("/v1/merchants/m1/pix-transfers", e.m1, "nul-1", body)
	require.Equal(t, http.StatusBadRequest, r.Status, string(r.Body))
	require.Equal(t, "description", r.field(t))

	body = pixBody("1.00")
	body["metadata"] = map[string]any{"order": "x\x00"}
	r = e.post("/v1/merchants/m1/pix-transfers", e.m1, "nul-2", body)
	require.Equal(t, http.StatusBadRequest, r.Status, string(r.Body))
	require.Equal(t, "metadata.order", r.field(t))

	body = pixBody("1.00")
	body["metadata"] = map[string]any{"or\x00der": "x"}
	r = e.post("/v1/merchants/m1/pix-transfers", e.m1, "nul-2b", body)
	require.Equal(t, http.StatusBadRequest, r.Status, string(r.Body))
	require.Equal(t, "metadata", r.field(t))

	r = e.post("/v1/merchants", e.admin, "nul-3", map[string]any{"id": "m9", "name": "Loja\x00"})
	require.Equal(t, http.StatusBadRequest, r.Status, string(r.Body))
	require.Equal(t, "name", r.field(t))

	r = e.get("/v1/merchants/m%00/balances", e.admin)
	require.Equal(t, http.StatusBadRequest, r.Status, string(r.Body))
	r = e.get("/v1/ledger/transactions?cause_kind=%00", e.auditor)
	require.Equal(t, http.StatusBadRequest, r.Status, string(r.Body))
	require.Equal(t, "cause_kind", r.field(t))
	r = e.get("/v1/ledger/transactions?cause_kind=%ff", e.auditor)
	require.Equal(t, http.StatusBadRequest, r.Status, string(r.Body))
	require.Zero(t, e.countRows("payouts"))
	require.NotContains(t, e.logs.String(), `"level":"ERROR"`)
}

// Duplicate keys and keys differing only in case were read, the last one
// winning: a gateway that reads the first key would disagree about the
// amount paid. Both are 400 at every object level, and nothing is paid.
func TestHardeningDuplicateAndCaseVariantKeysRefused(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	const dest = `"destination":{"pix_key":{"type":"email","value":"joao@example.com"}}`
	cases := []struct{ name, body, field string }{
		{"duplicate", `{"amount":"0.01","currency":"BRL",` + dest + `,"amount":"0.02"}`, "amount"},
		{"upper case", `{"AMOUNT":"0.02","currency":"BRL",` + dest + `}`, "AMOUNT"},
		{"case variant beside the key", `{"amount":"0.01","Amount":"0.02","currency":"BRL",` + dest + `}`, "Amount"},
		{"nested duplicate", `{"amount":"0.01","currency":"BRL","destination":{"pix_key":{"type":"email","value":"a@b.co","value":"c@d.co"}}}`,
			"destination.pix_key.value"},
		{"nested case variant", `{"amount":"0.01","currency":"BRL","destination":{"Pix_Key":{"type":"email","value":"a@b.co"}}}`,
			"destination.Pix_Key"},
		{"duplicate metadata key", `{"amount":"0.01","currency":"BRL",` + dest + `,"metadata":{"a":"1","a":"2"}}`, "metadata.a"},
	}
	for _, c := range cases {
		r := e.post("/v1/merchants/m1/pix-transfers", e.m1, "dup-"+c.name, c.body)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", c.name, r.Body)
		require.Equal(t, "validation_failed", r.code(t), c.name)
		require.Equal(t, c.field, r.field(t), c.name)
	}
	split := `{"currency":"BRL","legs":[{"operation":"pix_transfer","amount":"1.00","amount":"2.00",` + dest + `}]}`
	r := e.post("/v1/merchants/m1/splits", e.m1, "dup-split", split)
	require.Equal(t, http.StatusBadRequest, r.Status, string(r.Body))
	require.Equal(t, "legs[0].amount", r.field(t))
	require.Zero(t, e.countRows("payouts"), "nothing was paid")
}

// A refused request wrote rows: a Pix transfer in CHF answered 400 after
// creating 18 ledger accounts, and the balances listed CHF. Now nothing is
// written, the problem names the currency, and no internal chain leaks.
func TestHardeningRefusedRequestWritesNothing(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	accounts := e.countRows("ledger_accounts")
	for i, path := range []string{"/v1/merchants/m1/pix-transfers", "/v1/merchants/m2/pix-transfers"} {
		key := []string{e.m1, e.m2}[i]
		body := pixBody("1.00")
		body["currency"] = "CHF"
		r := e.post(path, key, "chf", body)
		require.Equal(t, http.StatusBadRequest, r.Status, string(r.Body))
		require.Equal(t, "currency", r.field(t))
		detail := r.json(t)["detail"].(string)
		for _, leak := range []string{"invalid request", "invalid input", "attempts", "providers", "operation input"} {
			require.NotContains(t, detail, leak)
		}
	}
	body := map[string]any{"operation": "bank_payout", "amount": "1.00", "currency": "USD",
		"destination": map[string]any{"bank_account": map[string]any{"ispb": "12345678", "branch": "1", "account": "12345-6", "type": "checking"}}}
	r := e.post("/v1/merchants/m1/payouts", e.m1, "usd", body)
	require.Equal(t, http.StatusBadRequest, r.Status, string(r.Body))
	require.Equal(t, "currency", r.field(t))
	split := map[string]any{"currency": "EUR", "legs": []any{map[string]any{"operation": "pix_transfer", "amount": "1.00",
		"destination": pixBody("1")["destination"]}}}
	r = e.post("/v1/merchants/m1/splits", e.m1, "eur", split)
	require.Equal(t, http.StatusBadRequest, r.Status, string(r.Body))
	require.Equal(t, "currency", r.field(t))

	// m2 has no money: a BRL payout is refused for its balance, and leaves
	// no accounts behind either.
	r = e.post("/v1/merchants/m2/pix-transfers", e.m2, "poor", pixBody("1.00"))
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Equal(t, accounts, e.countRows("ledger_accounts"), "a refused request creates no ledger accounts")
	bs := e.get("/v1/merchants/m1/balances", e.m1)
	require.NotContains(t, string(bs.Body), "CHF")
	bs = e.get("/v1/merchants/m2/balances", e.m2)
	require.Empty(t, bs.json(t)["balances"], "m2 never used a currency")

	// Funded with less than it asks for, m2 is refused before its reserve
	// and the provider's clearing accounts are made.
	require.Equal(t, http.StatusCreated, e.post("/v1/merchants/m2/fundings", e.admin, "fund-m2",
		map[string]any{"amount": "0.50", "currency": "BRL", "reason": "test"}).Status)
	accounts = e.countRows("ledger_accounts")
	r = e.post("/v1/merchants/m2/pix-transfers", e.m2, "poor-2", pixBody("1.00"))
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Equal(t, "insufficient_balance", r.code(t))
	r = e.post("/v1/merchants/m2/splits", e.m2, "poor-3", map[string]any{"currency": "BRL", "legs": []any{
		map[string]any{"operation": "pix_transfer", "amount": "0.30", "destination": pixBody("1")["destination"]},
		map[string]any{"operation": "pix_transfer", "amount": "0.30", "destination": pixBody("1")["destination"]}}})
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))
	require.Equal(t, accounts, e.countRows("ledger_accounts"), "a refused payout creates no ledger accounts")
	require.Zero(t, e.countRows("payouts"))
	require.Equal(t, http.StatusCreated, e.post("/v1/merchants/m2/pix-transfers", e.m2, "rich", pixBody("0.50")).Status)
}

// Problems name the request field the client sent.
func TestHardeningProblemsNameTheRequestField(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	card := func(extra map[string]any) map[string]any {
		b := map[string]any{"kind": "card", "amount": "10.00", "currency": "BRL", "card_token": "tok_visa"}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	pix := func(extra map[string]any) map[string]any {
		b := map[string]any{"kind": "pix", "amount": "10.00", "currency": "BRL"}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	cases := []struct {
		name  string
		body  map[string]any
		field string
	}{
		{"card with payer_name", card(map[string]any{"payer_name": "Ana"}), "payer_name"},
		{"card with payer_tax_id", card(map[string]any{"payer_tax_id": "12345678909"}), "payer_tax_id"},
		{"card with expiry", card(map[string]any{"pix_expires_in_seconds": 600}), "pix_expires_in_seconds"},
		{"pix with a bad payer_tax_id", pix(map[string]any{"payer_tax_id": "123"}), "payer_tax_id"},
		{"pix with a long payer_name", pix(map[string]any{"payer_name": strings.Repeat("a", 201)}), "payer_name"},
		{"pix with a short expiry", pix(map[string]any{"pix_expires_in_seconds": 5}), "pix_expires_in_seconds"},
		{"pix in USD", pix(map[string]any{"currency": "USD"}), "currency"},
	}
	for _, c := range cases {
		r := e.post("/v1/merchants/m1/charges", e.m1, "field-"+c.name, c.body)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", c.name, r.Body)
		require.Equal(t, c.field, r.field(t), c.name)
	}

	// A refund in another currency than the charge's names currency.
	r := e.post("/v1/merchants/m1/charges", e.m1, "field-charge", card(nil))
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	c := r.json(t)
	e.execute(c["attempt_id"].(string))
	r = e.post("/v1/merchants/m1/charges/"+c["id"].(string)+"/refunds", e.m1, "field-refund", map[string]any{"amount": "1.00", "currency": "USD"})
	require.Equal(t, http.StatusBadRequest, r.Status, string(r.Body))
	require.Equal(t, "currency", r.field(t))

	// A merchant id that is not one names id; a bad name names name.
	r = e.post("/v1/merchants", e.admin, "field-m1", map[string]any{"id": "Not An Id", "name": "Loja"})
	require.Equal(t, http.StatusBadRequest, r.Status, string(r.Body))
	require.Equal(t, "id", r.field(t))
	r = e.post("/v1/merchants", e.admin, "field-m2", map[string]any{"id": "m9", "name": " "})
	require.Equal(t, http.StatusBadRequest, r.Status, string(r.Body))
	require.Equal(t, "name", r.field(t))
}

// The spec limits description in characters, not bytes: 100 × "é" (200
// bytes) is a valid description; 141 characters are not.
func TestHardeningDescriptionLimitInCharacters(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	body := pixBody("1.00")
	body["description"] = strings.Repeat("é", 140)
	r := e.post("/v1/merchants/m1/pix-transfers", e.m1, "desc-1", body)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	require.Equal(t, strings.Repeat("é", 140), r.json(t)["description"])
	body["description"] = strings.Repeat("é", 141)
	r = e.post("/v1/merchants/m1/pix-transfers", e.m1, "desc-2", body)
	require.Equal(t, http.StatusBadRequest, r.Status, string(r.Body))
	require.Equal(t, "description", r.field(t))

	ch := map[string]any{"kind": "card", "amount": "10.00", "currency": "BRL", "card_token": "tok_visa", "description": strings.Repeat("é", 100)}
	r = e.post("/v1/merchants/m1/charges", e.m1, "desc-3", ch)
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	c := r.json(t)
	a := e.execute(c["attempt_id"].(string))
	require.Equal(t, "succeeded", string(a.Status))
	r = e.post("/v1/merchants/m1/charges/"+c["id"].(string)+"/refunds", e.m1, "desc-4",
		map[string]any{"amount": "1.00", "currency": "BRL", "description": strings.Repeat("ç", 140)})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
}

// The Idempotency-Key is echoed on every answer, the refusals of role and
// scope checks included, and on key creation and endpoint registration.
func TestHardeningIdempotencyKeyEchoedEverywhere(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	r := e.post("/v1/merchants/m1/pix-transfers", e.auditor, "echo-403", pixBody("1.00"))
	require.Equal(t, http.StatusForbidden, r.Status)
	require.Equal(t, "echo-403", r.Header.Get("Idempotency-Key"))
	r = e.post("/v1/merchants/m1/pix-transfers", e.m2, "echo-404", pixBody("1.00"))
	require.Equal(t, http.StatusNotFound, r.Status)
	require.Equal(t, "echo-404", r.Header.Get("Idempotency-Key"))
	r = e.post("/v1/merchants/m1/pix-transfers", "sk_nobody", "echo-401", pixBody("1.00"))
	require.Equal(t, http.StatusUnauthorized, r.Status)
	require.Equal(t, "echo-401", r.Header.Get("Idempotency-Key"))
	r = e.post("/v1/keys", e.admin, "echo-key", map[string]any{"role": "auditor", "name": "x"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	require.Equal(t, "echo-key", r.Header.Get("Idempotency-Key"))
	r = e.post("/v1/merchants/m1/notification-endpoints", e.m1, "echo-ep", map[string]any{"url": "http://127.0.0.1:1/hook"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	require.Equal(t, "echo-ep", r.Header.Get("Idempotency-Key"))
}

// POST /v1/keys honours the Idempotency-Key: a retry answers the key made
// the first time (without its secret, which saldo never stores) instead of
// making a second key. The same holds for endpoint registration. Answers
// that carry a secret are never cached.
func TestHardeningCreateKeyAndEndpointHonourIdempotencyKey(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	keys := e.countRows("api_keys")
	body := map[string]any{"role": "merchant", "merchant_id": "m2", "name": "retry me"}
	first := e.post("/v1/keys", e.admin, "key-once", body)
	require.Equal(t, http.StatusCreated, first.Status, string(first.Body))
	require.Equal(t, "no-store", first.Header.Get("Cache-Control"))
	secret := first.json(t)["secret"].(string)
	require.NotEmpty(t, secret)
	again := e.post("/v1/keys", e.admin, "key-once", body)
	require.Equal(t, http.StatusCreated, again.Status, string(again.Body))
	require.Equal(t, "true", again.Header.Get(api.ReplayedHeader))
	require.Equal(t, first.json(t)["id"], again.json(t)["id"])
	require.NotContains(t, string(again.Body), secret, "the secret is shown once")
	require.Equal(t, "no-store", again.Header.Get("Cache-Control"))
	require.Equal(t, keys+1, e.countRows("api_keys"), "a retry makes no second key")
	var stored int
	require.NoError(t, e.pool.QueryRow(e.ctx, `SELECT count(*) FROM idempotent_requests WHERE position($1 in convert_from(response_body, 'UTF8')) > 0`,
		secret).Scan(&stored))
	require.Zero(t, stored, "the secret is not stored for replay")
	require.Equal(t, http.StatusOK, e.get("/v1/merchants/m2/balances", secret).Status)
	r := e.post("/v1/keys", e.admin, "key-once", map[string]any{"role": "auditor"})
	require.Equal(t, http.StatusUnprocessableEntity, r.Status, string(r.Body))

	eps := e.countRows("notification_endpoints")
	ep := map[string]any{"url": "http://127.0.0.1:1/hook"}
	first = e.post("/v1/merchants/m1/notification-endpoints", e.m1, "ep-once", ep)
	require.Equal(t, http.StatusCreated, first.Status, string(first.Body))
	require.Equal(t, "no-store", first.Header.Get("Cache-Control"))
	whsec := first.json(t)["secret"].(string)
	again = e.post("/v1/merchants/m1/notification-endpoints", e.m1, "ep-once", ep)
	require.Equal(t, http.StatusCreated, again.Status, string(again.Body))
	require.Equal(t, first.json(t)["id"], again.json(t)["id"])
	require.NotContains(t, string(again.Body), whsec)
	require.Equal(t, eps+1, e.countRows("notification_endpoints"))
}

// The body is read before it is judged, whatever Content-Length says: a
// chunked empty refund body is no body (a full refund), a chunked garbage
// retry body is 400.
func TestHardeningBodyReadNotContentLength(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	r := e.post("/v1/merchants/m1/charges", e.m1, "body-ch", map[string]any{"kind": "card", "amount": "10.00", "currency": "BRL", "card_token": "tok_visa"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	c := r.json(t)
	e.execute(c["attempt_id"].(string))
	r = e.raw(http.MethodPost, "/v1/merchants/m1/charges/"+c["id"].(string)+"/refunds", e.m1, strings.NewReader(""), true,
		map[string]string{"Idempotency-Key": "body-rf", "Content-Type": "application/json"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
	require.Equal(t, "10.00", r.json(t)["amount"])

	p := e.createPix("1.00", "body-p")
	r = e.raw(http.MethodPost, "/v1/merchants/m1/payouts/"+p["id"].(string)+"/retry", e.m1, strings.NewReader("garbage"), true,
		map[string]string{"Idempotency-Key": "body-retry", "Content-Type": "application/json"})
	require.Equal(t, http.StatusBadRequest, r.Status, string(r.Body))
	r = e.raw(http.MethodPost, "/v1/merchants/m1/payouts/"+p["id"].(string)+"/retry", e.m1, strings.NewReader(`{"x":1}`), true,
		map[string]string{"Idempotency-Key": "body-retry2", "Content-Type": "application/json"})
	require.Equal(t, http.StatusBadRequest, r.Status, string(r.Body))
	require.Equal(t, "x", r.field(t))
}

// A ';' made Go drop the parameter and the filter failed open (every
// transaction listed). An unparsable query string is 400.
func TestHardeningUnparsableQueryRefused(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	r := e.get("/v1/ledger/transactions?cause_kind=%27;select", e.auditor)
	require.Equal(t, http.StatusBadRequest, r.Status, string(r.Body))
	require.Equal(t, "invalid_query", r.code(t))
	r = e.get("/v1/merchants/m1/payouts?status=failed;x=1", e.m1)
	require.Equal(t, http.StatusBadRequest, r.Status, string(r.Body))
	r = e.get("/v1/merchants/m1/payouts?status=%zz", e.m1)
	require.Equal(t, http.StatusBadRequest, r.Status, string(r.Body))
	r = e.get("/v1/ledger/transactions?cause_kind=%27%3Bselect", e.auditor)
	require.Equal(t, http.StatusOK, r.Status, "an escaped ';' is a value like any other")
	require.Empty(t, r.json(t)["data"])
}

// A merchant key learnt which merchant ids exist from the split recipient
// error: an unknown recipient and one that is not allowed get one answer.
func TestHardeningSplitRecipientDoesNotRevealMerchants(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	charge := func(recipient, idem string) resp {
		return e.post("/v1/merchants/m1/charges", e.m1, idem, map[string]any{"kind": "card", "amount": "10.00", "currency": "BRL",
			"card_token": "tok_visa", "splits": []any{map[string]any{"recipient_id": recipient, "percent": "10"}}})
	}
	unknown := charge("no-such-merchant", "sr-1")
	self := charge("m1", "sr-2")
	require.Equal(t, http.StatusBadRequest, unknown.Status, string(unknown.Body))
	require.Equal(t, unknown.Status, self.Status)
	u, s := unknown.json(t), self.json(t)
	for _, k := range []string{"code", "title", "detail", "field"} {
		require.Equal(t, u[k], s[k], k)
	}
	require.NotContains(t, string(unknown.Body), "no-such-merchant")
	require.Equal(t, http.StatusCreated, charge("m2", "sr-3").Status)
}

// Notification URLs into the platform's network are refused when they are
// registered (the dial check refuses them again when dialled); an API built
// with AllowPrivateNotificationURLs (saldo dev, tests) accepts them.
func TestHardeningNotificationURLPrivateTargetsRefused(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	strict, err := api.New(api.Config{Pool: e.pool, Payouts: e.pay, Attempts: e.att, Charges: e.charges,
		Logger: slog.New(slog.DiscardHandler), Providers: map[string]providers.Provider{"sim": e.prov}, Clock: e.clock})
	require.NoError(t, err)
	srv := httptest.NewServer(strict)
	t.Cleanup(srv.Close)
	register := func(u string) *http.Response {
		b := bytes.NewBufferString(`{"url":"` + u + `"}`)
		hr, err := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL+"/v1/merchants/m1/notification-endpoints", b)
		require.NoError(t, err)
		hr.Header.Set("Authorization", "Bearer "+e.m1)
		hr.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(hr)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}
	for _, u := range []string{"http://127.0.0.1:8080/hook", "http://localhost/hook", "http://api.localhost/x", "http://10.1.2.3/hook",
		"http://192.168.0.1/", "http://172.16.5.4/", "http://169.254.169.254/latest/meta-data", "http://[::1]/hook",
		"http://[fe80::1]/hook", "http://0.0.0.0/", "http://100.64.0.1/", "http://[::ffff:127.0.0.1]/", "http://2130706433/",
		"http://0x7f.0.0.1/", "http://017700000001/"} {
		require.Equal(t, http.StatusBadRequest, register(u).StatusCode, u)
	}
	require.Equal(t, http.StatusCreated, register("https://93.184.215.14/hook").StatusCode)
	// The test API allows loopback targets (its receivers listen there).
	r := e.post("/v1/merchants/m1/notification-endpoints", e.m1, "", map[string]any{"url": "http://127.0.0.1:9/hook"})
	require.Equal(t, http.StatusCreated, r.Status, string(r.Body))
}

// No server-side request forgery into the platform's network
// (docs/pitfalls.md, "Merchant notification URLs can point inside the
// network"): with private URLs refused (as saldo serve runs), a NAT64
// literal that embeds 10.0.0.5 is refused at registration like 10.0.0.5.
func TestRegistrationRefusesNAT64Literal(t *testing.T) {
	t.Parallel()
	e := setupPrivateRefused(t)
	for _, u := range []string{"http://[64:ff9b::a00:5]:5432/", "http://[64:ff9b::a9fe:a9fe]/latest/meta-data",
		"http://[64:ff9b:1::a00:5]/", "http://[2002:a00:5::1]/", "http://[::a00:5]/"} {
		r := e.post("/v1/merchants/m1/notification-endpoints", e.m1, "", map[string]any{"url": u})
		require.Equal(t, http.StatusBadRequest, r.Status, "accepted %s, an address inside the network: %s", u, r.Body)
		require.Equal(t, "url", r.field(t))
	}
	r := e.post("/v1/merchants/m1/notification-endpoints", e.m1, "", map[string]any{"url": "https://[64:ff9b::5db8:d70e]/hook"})
	require.Equal(t, http.StatusCreated, r.Status, "a public host through NAT64: %s", r.Body)
}

// setupPrivateRefused is setup with the API built as saldo serve builds it
// (AllowPrivateNotificationURLs false).
func setupPrivateRefused(t *testing.T) *env {
	e := setup(t, sim.Config{})
	srv, err := api.New(api.Config{Pool: e.pool, Payouts: e.pay, Attempts: e.att, Charges: e.charges, Clock: e.clock})
	require.NoError(t, err)
	h := httptest.NewServer(srv)
	t.Cleanup(h.Close)
	e.http = h
	return e
}

// Smaller edges: the nil EVP, a split percent with an exponent, a POST
// body without a Content-Type.
func TestHardeningSmallerEdges(t *testing.T) {
	t.Parallel()
	e := setup(t, sim.Config{})
	r := e.post("/v1/merchants/m1/pix-transfers", e.m1, "nil-evp", map[string]any{"amount": "1.00", "currency": "BRL",
		"destination": map[string]any{"pix_key": map[string]any{"type": "evp", "value": "00000000-0000-0000-0000-000000000000"}}})
	require.Equal(t, http.StatusBadRequest, r.Status, string(r.Body))
	require.Equal(t, "destination.pix_key.value", r.field(t))

	for i, pct := range []string{"1e2", "1E1", "+10", "10.", ".5", " 10"} {
		r = e.post("/v1/merchants/m1/charges", e.m1, "pct-"+pct, map[string]any{"kind": "card", "amount": "10.00", "currency": "BRL",
			"card_token": "tok_visa", "splits": []any{map[string]any{"recipient_id": "m2", "percent": pct}}})
		require.Equal(t, http.StatusBadRequest, r.Status, "%d %q: %s", i, pct, r.Body)
		require.Equal(t, "splits[0].percent", r.field(t))
	}

	r = e.raw(http.MethodPost, "/v1/merchants/m1/pix-transfers", e.m1, strings.NewReader(
		`{"amount":"1.00","currency":"BRL","destination":{"pix_key":{"type":"email","value":"a@b.co"}}}`), false,
		map[string]string{"Idempotency-Key": "no-ct"})
	require.Equal(t, http.StatusUnsupportedMediaType, r.Status, string(r.Body))
	require.Equal(t, "unsupported_media_type", r.code(t))
	require.Equal(t, "no-ct", r.Header.Get("Idempotency-Key"))
	require.Zero(t, e.countRows("payouts"))
	// A POST that takes no body needs no Content-Type.
	r = e.raw(http.MethodPost, "/v1/keys/key_0000000000000000/revoke", e.admin, nil, false, nil)
	require.Equal(t, http.StatusNotFound, r.Status, string(r.Body))
}

package sim_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/saldo/saldo/providers/sim"
)

// FuzzSubmitBody: whatever the body, the sim answers a JSON 2xx or 4xx,
// never a 5xx or a crash, and a 2xx always names an operation it recorded.
func FuzzSubmitBody(f *testing.F) {
	for _, s := range []string{
		`{"operation":"pix_transfer","reference":"r1","amount":"1.00","currency":"BRL","destination":{"pix_key":{"type":"email","value":"a@b.c"}}}`,
		`{"operation":"card_charge","reference":"r2","amount":"10","currency":"JPY","card_token":"tok_visa"}`,
		`{"operation":"refund","reference":"r3","amount":"1.00","currency":"BRL","charge":{"id":"op_1"}}`,
		`{"operation":"pix_charge","reference":"abcdefghijklmnopqrstuvwxyz0","amount":"1.00","currency":"BRL","expires_in_seconds":60}`,
		`{"operation":"bank_payout","reference":"r4","amount":"0.01","currency":"BRL","destination":{"bank_account":{"ispb":"00000000","branch":"1","account":"9-9","type":"savings"}}}`,
		`{}`, `null`, `[]`, `"x"`, `{"amount":"1e999"}`,
	} {
		f.Add([]byte(s), "key")
	}
	srv := sim.NewServer(sim.Config{}).Start()
	f.Cleanup(srv.Close)
	f.Fuzz(func(t *testing.T, body []byte, key string) {
		req, err := http.NewRequest(http.MethodPost, srv.URL()+"/v1/operations", bytes.NewReader(body))
		if err != nil {
			t.Skip()
		}
		if key != "" && isToken(key) {
			req.Header["Idempotency-Key"] = []string{key}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("transport: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 500 || resp.StatusCode < 200 || (resp.StatusCode >= 300 && resp.StatusCode < 400) {
			t.Fatalf("status %d for %q: %s", resp.StatusCode, body, b)
		}
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("answer is not a JSON object: %s", b)
		}
		if resp.StatusCode < 300 {
			id, _ := v["id"].(string)
			ref, _ := v["reference"].(string)
			found := false
			for _, o := range srv.Operations(ref) {
				found = found || o.ID == id
			}
			if !found {
				t.Fatalf("2xx names operation %q/%q the oracle does not know", id, ref)
			}
		}
	})
}

// isToken: printable ASCII without spaces (what a client can send as a header).
func isToken(s string) bool {
	for _, c := range []byte(s) {
		if c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

package pix_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/pix/pixtest"
)

// TestCobWithoutExpiracaoIsNotExpired_R9_R14 shows that a lookup (R14)
// never reports failed what can still succeed (a final never changes, R9:
// a payment after it is only a divergence for a human). In the BCB
// description calendario.expiracao is optional with "default: 86400" (a
// cob lives 24 h unless told otherwise), so a GET /cob answer may leave
// it out; read as 0, an ATIVA cob created 20 minutes ago (past the 10 min
// grace) would be failed cob_expired while the payer can still pay it.
func TestCobWithoutExpiracaoIsNotExpired_R9_R14(t *testing.T) {
	e := newEnv(t, pixtest.Options{})
	txid := ref(t)
	criacao := time.Now().Add(-20 * time.Minute).UTC().Format(time.RFC3339)
	e.srv.FailNext(http.StatusOK, fmt.Sprintf(`{"calendario":{"criacao":%q},"txid":%q,"revisao":0,"status":"ATIVA",`+
		`"valor":{"original":"10.50"},"chave":%q,"pixCopiaECola":"000201..."}`, criacao, txid, receivingKey))
	lr := e.lookup(providers.OpPixCharge, txid)
	if !lr.Found {
		t.Fatalf("lookup %+v", lr)
	}
	if lr.State != providers.StateProcessing {
		t.Errorf("a cob created 20 min ago with the default 24 h expiry is %s (%s: %s), want processing",
			lr.State, lr.FailureCode, lr.FailureReason)
	}
}

package pix_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/pix"
	"github.com/saldo/saldo/providers/pix/pixtest"
)

// TestCobExpectedByIsExpiryPlusGrace_R18: an unpaid (ATIVA) cob is
// expected to end by its expiry (calendario.criacao + expiracao) plus the
// adapter's ExpiryGrace: paid before, failed cob_expired after. The
// creation answer and every lookup say so (ExpectedBy), so that the
// attempts core does not send a long cob to review while the payer can
// still pay it. A paid cob, and a cob whose expiry the answer does not
// give (no criacao), state none.
func TestCobExpectedByIsExpiryPlusGrace_R18(t *testing.T) {
	const grace = 7 * time.Minute
	e := newEnv(t, pixtest.Options{}, func(c *pix.Config) { c.ExpiryGrace = grace })
	txid := ref(t)
	in := cobInput()
	in.ExpiresIn = 23 * time.Hour
	sr, _ := e.submit(providers.OpPixCharge, in, txid)
	var d pix.CobData
	if err := json.Unmarshal(sr.Data, &d); err != nil || d.ExpiresAt.IsZero() {
		t.Fatalf("cob data %s (%v)", sr.Data, err)
	}
	want := d.ExpiresAt.Add(grace)
	if !sr.ExpectedBy.Equal(want) || time.Until(sr.ExpectedBy) < 23*time.Hour {
		t.Fatalf("created cob expected by %s, want %s (expiry %s + grace)", sr.ExpectedBy, want, d.ExpiresAt)
	}
	if lr := e.lookup(providers.OpPixCharge, txid); lr.State != providers.StateProcessing || !lr.ExpectedBy.Equal(want) {
		t.Fatalf("active cob lookup: %s expected by %s, want processing by %s", lr.State, lr.ExpectedBy, want)
	}
	if _, err := e.srv.PayCob(txid); err != nil {
		t.Fatal(err)
	}
	if lr := e.lookup(providers.OpPixCharge, txid); lr.State != providers.StateSucceeded || !lr.ExpectedBy.IsZero() {
		t.Errorf("paid cob: %s expected by %s, want none", lr.State, lr.ExpectedBy)
	}

	// The PSP's own criacao and expiracao, exactly.
	other := ref(t)
	criacao := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	e.srv.FailNext(http.StatusOK, fmt.Sprintf(`{"calendario":{"criacao":%q,"expiracao":7200},"txid":%q,"revisao":0,`+
		`"status":"ATIVA","valor":{"original":"10.50"},"chave":%q}`, criacao.Format(time.RFC3339), other, receivingKey))
	if lr := e.lookup(providers.OpPixCharge, other); !lr.ExpectedBy.Equal(criacao.Add(2*time.Hour + grace)) {
		t.Errorf("cob created %s for 7200 s: expected by %s, want %s", criacao, lr.ExpectedBy, criacao.Add(2*time.Hour+grace))
	}
	e.srv.FailNext(http.StatusOK, fmt.Sprintf(`{"calendario":{"expiracao":7200},"txid":%q,"revisao":0,`+
		`"status":"ATIVA","valor":{"original":"10.50"},"chave":%q}`, other, receivingKey))
	if lr := e.lookup(providers.OpPixCharge, other); lr.State != providers.StateProcessing || !lr.ExpectedBy.IsZero() {
		t.Errorf("cob without criacao: %s expected by %s, want processing with none", lr.State, lr.ExpectedBy)
	}
}

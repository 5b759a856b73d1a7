package pix_test

import (
	"encoding/json"
	"testing"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/pix/pixtest"
)

// The fake PSP gives every return (devolucao) of a send an id of its own.
// Before, its 20-character devolucao id was the ISPB and the time cut to
// its ten minutes: two returns within ten minutes had the same id, so a
// test of two returns of one send (or of two sends) saw one devolucao id
// for both.
func TestFakePSPReturnsHaveIDsOfTheirOwn(t *testing.T) {
	e := newEnv(t, pixtest.Options{SendsFinal: true})
	ids, rtrs := map[string]bool{}, map[string]bool{}
	for range 2 {
		r := ref(t)
		sr, out := e.submit(providers.OpPixTransfer, providers.OperationInput{Amount: "10.00", Currency: "BRL",
			Destination: keyDest("a@b.com")}, r)
		wantOutcome(t, out, attempts.OutcomeSucceeded, sr)
		for _, v := range []string{"1.00", "2.00"} {
			if _, err := e.srv.ReturnSend(r, v); err != nil {
				t.Fatal(err)
			}
		}
		body, err := e.srv.ReturnNotice(r)
		if err != nil {
			t.Fatal(err)
		}
		var n struct {
			Pix []struct {
				Devolucoes []struct {
					ID    string `json:"id"`
					RtrID string `json:"rtrId"`
				} `json:"devolucoes"`
			} `json:"pix"`
		}
		if err := json.Unmarshal(body, &n); err != nil || len(n.Pix) != 1 || len(n.Pix[0].Devolucoes) != 2 {
			t.Fatalf("notice %s: %v", body, err)
		}
		for _, d := range n.Pix[0].Devolucoes {
			if ids[d.ID] || rtrs[d.RtrID] {
				t.Fatalf("devolucao id %s or rtrId %s given twice (notice %s)", d.ID, d.RtrID, body)
			}
			if len(d.ID) != 20 || len(d.RtrID) != 32 {
				t.Errorf("devolucao id %q, rtrId %q: want 20 and 32 characters", d.ID, d.RtrID)
			}
			ids[d.ID], rtrs[d.RtrID] = true, true
		}
	}
}

package sim_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// R19, issue 16: the statement can be made to lie in each way
// reconciliation must catch (hide, duplicate, change an amount, add an
// operation nobody sent), over HTTP through the adapter; lookups and the
// oracle keep telling the truth.
func TestStatementLies_R19(t *testing.T) {
	t.Parallel()
	day := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	clock := sim.NewManualClock(day)
	srv, p := setup(t, sim.Config{Clock: clock.Now})
	hidden := open(t, p, transfer("1.00"))
	hidden.send(p)
	dup := open(t, p, transfer("2.00"))
	dupRes := dup.send(p)
	changed := open(t, p, transfer("3.00"))
	changed.send(p)
	honest := open(t, p, transfer("4.00"))
	honest.send(p)

	require.NoError(t, srv.AddStatementLie(sim.StatementLie{Kind: sim.LieHide, Reference: hidden.ref}))
	require.NoError(t, srv.AddStatementLie(sim.StatementLie{Kind: sim.LieDuplicate, Reference: dup.ref}))
	require.NoError(t, srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAmount, Reference: changed.ref, Amount: "30.00"}))
	added := newRef()
	require.NoError(t, srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: added,
		Operation: providers.OpPixTransfer, Amount: "9.99", Currency: "BRL", At: day.Add(time.Hour)}))
	require.NoError(t, srv.AddStatementLie(sim.StatementLie{Kind: sim.LieAdd, Reference: newRef(),
		Operation: providers.OpPixTransfer, Amount: "1.00", Currency: "BRL", At: day.Add(24 * time.Hour)}),
		"an added operation of another day")
	require.Error(t, srv.AddStatementLie(sim.StatementLie{Kind: sim.LieHide}))
	require.Error(t, srv.AddStatementLie(sim.StatementLie{Kind: "fib", Reference: "x"}))

	st, err := p.Statement(context.Background(), day)
	require.NoError(t, err)
	byRef := map[string][]providers.StatementEntry{}
	for _, e := range st {
		byRef[e.Reference] = append(byRef[e.Reference], e)
	}
	require.Len(t, st, 5)
	require.Empty(t, byRef[hidden.ref])
	require.Len(t, byRef[dup.ref], 2)
	require.Equal(t, dupRes.ProviderID, byRef[dup.ref][0].ProviderID)
	require.Equal(t, dupRes.ProviderID+"_dup", byRef[dup.ref][1].ProviderID)
	require.Equal(t, "30.00", byRef[changed.ref][0].Amount)
	require.Equal(t, "4.00", byRef[honest.ref][0].Amount)
	require.Len(t, byRef[added], 1)
	require.Equal(t, providers.StateSucceeded, byRef[added][0].State)
	require.Equal(t, "9.99", byRef[added][0].Amount)

	// The truth elsewhere is untouched.
	require.Len(t, srv.Operations(hidden.ref), 1)
	require.Len(t, srv.Operations(dup.ref), 1)
	require.Equal(t, "3.00", srv.Operations(changed.ref)[0].Amount)
	require.Empty(t, srv.Operations(added))
	lr, err := p.Lookup(context.Background(), providers.OpPixTransfer, hidden.ref)
	require.NoError(t, err)
	require.True(t, lr.Found)
}

// The lies can be told over HTTP to a sim in another process.
func TestStatementLieOverHTTP_R19(t *testing.T) {
	t.Parallel()
	day := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	srv, p := setup(t, sim.Config{Clock: sim.NewManualClock(day).Now})
	post := func(body string) int {
		res, err := http.Post(srv.URL()+"/sim/statement-lies", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		res.Body.Close()
		return res.StatusCode
	}
	require.Equal(t, http.StatusOK, post(`{"kind": "add", "reference": "`+strings.Repeat("e", 32)+
		`", "operation": "pix_transfer", "amount": "2.00", "currency": "BRL", "at": "2026-12-02T11:00:00Z"}`))
	require.Equal(t, http.StatusBadRequest, post(`{"kind": "hide"}`))
	require.Equal(t, http.StatusBadRequest, post(`{"kind": "hide", "reference": "x", "extra": 1}`))
	st, err := p.Statement(context.Background(), day)
	require.NoError(t, err)
	require.Len(t, st, 1)
	require.Equal(t, "op_added_1", st[0].ProviderID)
}

// R19: the sim lists an operation on the day it became final, as saldo
// records it: its adapter declares a day either side for every operation
// the sim supports.
func TestStatementDatingDeclared_R19(t *testing.T) {
	srv := sim.NewServer(sim.Config{}).Start()
	t.Cleanup(srv.Close)
	p := srv.NewProvider()
	for _, op := range p.Capabilities().Operations {
		require.Equal(t, providers.DefaultStatementDating, p.StatementDating()[op], "%s", op)
		require.Equal(t, providers.DefaultStatementDating, providers.StatementWindow(p, op), "%s", op)
	}
}

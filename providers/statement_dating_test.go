package providers_test

import (
	"testing"

	"github.com/saldo/saldo/providers"
)

type dater struct {
	providers.Provider
	d map[providers.Operation]providers.StatementDating
}

func (d dater) StatementDating() map[providers.Operation]providers.StatementDating { return d.d }

// R19: an operation's statement window is what its adapter declares, a
// day either side when it declares nothing, and never narrower than that.
func TestStatementWindowIsDeclaredAndNeverNarrower_R19(t *testing.T) {
	p := dater{d: map[providers.Operation]providers.StatementDating{
		providers.OpBankPayout: {Before: 14, After: 1},
		providers.OpRefund:     {Before: 0, After: 3},
	}}
	for op, want := range map[providers.Operation]providers.StatementDating{
		providers.OpBankPayout:  {Before: 14, After: 1},
		providers.OpRefund:      {Before: 1, After: 3},
		providers.OpPixTransfer: providers.DefaultStatementDating,
	} {
		if got := providers.StatementWindow(p, op); got != want {
			t.Errorf("%s: window %+v, want %+v", op, got, want)
		}
	}
	if got := providers.StatementAfter(p); got != 3 {
		t.Errorf("StatementAfter %d, want 3", got)
	}
	var none providers.Provider
	if got := providers.StatementWindow(none, providers.OpRefund); got != providers.DefaultStatementDating {
		t.Errorf("window of a provider that declares nothing %+v", got)
	}
	if got := providers.StatementAfter(none); got != providers.DefaultStatementDating.After {
		t.Errorf("StatementAfter of a provider that declares nothing %d", got)
	}
}

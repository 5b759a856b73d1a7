package payouts_test

import (
	"errors"
	"testing"

	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
)

// A Stripe connected account is the destination of an account_transfer,
// and of nothing else (issue 14, R21).
func TestValidateDestinationStripeAccount(t *testing.T) {
	acct := &providers.Destination{StripeAccount: "acct_1SellerA", HolderName: " Loja A "}
	got, err := payouts.ValidateDestination(providers.OpAccountTransfer, acct)
	if err != nil || got.StripeAccount != "acct_1SellerA" || got.HolderName != "Loja A" || got.PixKey != nil || got.BankAccount != nil {
		t.Fatalf("%+v %v", got, err)
	}
	bank := &providers.BankAccount{ISPB: "60701190", Branch: "0001", Account: "12345-6", Type: "checking"}
	pix := &providers.PixKey{Type: "email", Value: "ana@example.com"}
	for _, c := range []struct {
		name  string
		op    providers.Operation
		d     *providers.Destination
		field string
	}{
		{"not an account id", providers.OpAccountTransfer, &providers.Destination{StripeAccount: "acct_"}, "destination.stripe_account"},
		{"a customer id", providers.OpAccountTransfer, &providers.Destination{StripeAccount: "cus_123"}, "destination.stripe_account"},
		{"transfer to a bank account", providers.OpAccountTransfer, &providers.Destination{BankAccount: bank}, "destination"},
		{"transfer to a Pix key", providers.OpAccountTransfer, &providers.Destination{PixKey: pix}, "destination"},
		{"Pix transfer to an account", providers.OpPixTransfer, &providers.Destination{StripeAccount: "acct_1"}, "destination.stripe_account"},
		{"bank payout to an account", providers.OpBankPayout, &providers.Destination{StripeAccount: "acct_1"}, "destination.stripe_account"},
		{"two kinds", providers.OpAccountTransfer, &providers.Destination{StripeAccount: "acct_1", BankAccount: bank}, "destination"},
		{"none", providers.OpAccountTransfer, &providers.Destination{}, "destination"},
	} {
		_, err := payouts.ValidateDestination(c.op, c.d)
		var fe *payouts.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, payouts.ErrInvalid) {
			t.Errorf("%s: %v, want a %s error", c.name, err, c.field)
		}
	}
}

package payouts_test

import (
	"errors"
	"strings"
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

// A bank account attached to the platform's Stripe account
// (stripe_bank_account "ba_...") is the destination of a bank_payout, and
// of nothing else; holder name and tax id follow the rules of every kind
// (issue 14, R21).
func TestValidateDestinationStripeBankAccount(t *testing.T) {
	got, err := payouts.ValidateDestination(providers.OpBankPayout, &providers.Destination{StripeBankAccount: "ba_1NxWeekly",
		HolderName: " Loja A ", HolderTaxID: "529.982.247-25"})
	if err != nil || got.StripeBankAccount != "ba_1NxWeekly" || got.HolderName != "Loja A" || got.HolderTaxID != "52998224725" ||
		got.PixKey != nil || got.BankAccount != nil || got.StripeAccount != "" || got.Kind() != providers.DestStripeBankAccount {
		t.Fatalf("%+v %v", got, err)
	}
	bank := &providers.BankAccount{ISPB: "60701190", Branch: "0001", Account: "12345-6", Type: "checking"}
	pix := &providers.PixKey{Type: "email", Value: "ana@example.com"}
	long := strings.Repeat("x", 141)
	for _, c := range []struct {
		name  string
		op    providers.Operation
		d     *providers.Destination
		field string
	}{
		{"not a bank account id", providers.OpBankPayout, &providers.Destination{StripeBankAccount: "ba_"}, "destination.stripe_bank_account"},
		{"a card id", providers.OpBankPayout, &providers.Destination{StripeBankAccount: "card_1ABC"}, "destination.stripe_bank_account"},
		{"a connected account id", providers.OpBankPayout, &providers.Destination{StripeBankAccount: "acct_1ABC"}, "destination.stripe_bank_account"},
		{"punctuation", providers.OpBankPayout, &providers.Destination{StripeBankAccount: "ba_1-2"}, "destination.stripe_bank_account"},
		{"Pix transfer to it", providers.OpPixTransfer, &providers.Destination{StripeBankAccount: "ba_1ABC"}, "destination.stripe_bank_account"},
		{"account transfer to it", providers.OpAccountTransfer, &providers.Destination{StripeBankAccount: "ba_1ABC"}, "destination"},
		{"with a bank account", providers.OpBankPayout, &providers.Destination{StripeBankAccount: "ba_1ABC", BankAccount: bank}, "destination"},
		{"with a Pix key", providers.OpBankPayout, &providers.Destination{StripeBankAccount: "ba_1ABC", PixKey: pix}, "destination"},
		{"with a connected account", providers.OpBankPayout, &providers.Destination{StripeBankAccount: "ba_1ABC", StripeAccount: "acct_1"}, "destination"},
		{"bad holder tax id", providers.OpBankPayout, &providers.Destination{StripeBankAccount: "ba_1ABC", HolderTaxID: "123"}, "destination.holder_tax_id"},
		{"holder name too long", providers.OpBankPayout, &providers.Destination{StripeBankAccount: "ba_1ABC", HolderName: long}, "destination.holder_name"},
		{"bank payout to a Pix key", providers.OpBankPayout, &providers.Destination{PixKey: pix}, "destination.pix_key"},
		{"bank payout to nothing", providers.OpBankPayout, &providers.Destination{}, "destination"},
	} {
		_, err := payouts.ValidateDestination(c.op, c.d)
		var fe *payouts.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, payouts.ErrInvalid) {
			t.Errorf("%s: %v, want a %s error", c.name, err, c.field)
		}
	}
}

package payouts

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
)

func TestValidatePixKey(t *testing.T) {
	t.Parallel()
	cases := []struct {
		typ, value string
		want       string // canonical value; "" means invalid
		field      string // field named in the error
	}{
		{PixKeyCPF, "529.982.247-25", "52998224725", ""},
		{PixKeyCPF, "11144477735", "11144477735", ""},
		{PixKeyCPF, "52998224724", "", "k.value"}, // wrong check digit
		{PixKeyCPF, "11111111111", "", "k.value"}, // repeated digit
		{PixKeyCPF, "5299822472", "", "k.value"},  // 10 digits
		{PixKeyCPF, "5299822472a", "", "k.value"}, // letter
		{PixKeyCNPJ, "11.222.333/0001-81", "11222333000181", ""},
		{PixKeyCNPJ, "11444777000161", "11444777000161", ""},
		{PixKeyCNPJ, "11222333000182", "", "k.value"},
		{PixKeyCNPJ, "00000000000000", "", "k.value"},
		{PixKeyEmail, "Ana.Silva@Example.com.br", "ana.silva@example.com.br", ""},
		{PixKeyEmail, "ana@localhost", "", "k.value"},
		{PixKeyEmail, "Ana <ana@example.com>", "", "k.value"},
		{PixKeyEmail, "not-an-email", "", "k.value"},
		{PixKeyPhone, "+5511987654321", "+5511987654321", ""},
		{PixKeyPhone, "+551133334444", "+551133334444", ""},
		{PixKeyPhone, "11987654321", "", "k.value"},    // no +55
		{PixKeyPhone, "+14155550100", "", "k.value"},   // not Brazil
		{PixKeyPhone, "+5501987654321", "", "k.value"}, // area code 01
		{PixKeyEVP, "123E4567-E89B-12D3-A456-426614174000", "123e4567-e89b-12d3-a456-426614174000", ""},
		{PixKeyEVP, "123e4567e89b12d3a456426614174000", "", "k.value"},
		{"", "x", "", "k.type"},
		{"iban", "x", "", "k.type"},
	}
	for _, c := range cases {
		got, err := ValidatePixKey("k", providers.PixKey{Type: c.typ, Value: c.value})
		if c.want == "" {
			require.Error(t, err, "%s %q", c.typ, c.value)
			require.ErrorIs(t, err, ErrInvalid)
			var fe *FieldError
			require.True(t, errors.As(err, &fe))
			require.Equal(t, c.field, fe.Field, "%s %q", c.typ, c.value)
			continue
		}
		require.NoError(t, err, "%s %q", c.typ, c.value)
		require.Equal(t, c.want, got.Value)
		require.Equal(t, c.typ, got.Type)
	}
}

func TestValidateBankAccount(t *testing.T) {
	t.Parallel()
	ok := providers.BankAccount{ISPB: "60701190", Branch: "0001", Account: "12345-6", Type: AccountChecking}
	got, err := ValidateBankAccount("b", ok)
	require.NoError(t, err)
	require.Equal(t, "123456", got.Account)

	bad := map[string]providers.BankAccount{
		"b.ispb":    {ISPB: "6070119", Branch: "1", Account: "12", Type: AccountSavings},
		"b.branch":  {ISPB: "60701190", Branch: "12345", Account: "12", Type: AccountSavings},
		"b.account": {ISPB: "60701190", Branch: "1", Account: "1", Type: AccountSavings},
		"b.type":    {ISPB: "60701190", Branch: "1", Account: "12", Type: "brokerage"},
	}
	for field, a := range bad {
		_, err := ValidateBankAccount("b", a)
		var fe *FieldError
		require.True(t, errors.As(err, &fe), field)
		require.Equal(t, field, fe.Field)
	}
}

func TestValidateDestination(t *testing.T) {
	t.Parallel()
	key := &providers.PixKey{Type: PixKeyEmail, Value: "a@b.co"}
	acct := &providers.BankAccount{ISPB: "60701190", Branch: "1", Account: "12", Type: AccountPayment}

	_, err := ValidateDestination(providers.OpPixTransfer, &providers.Destination{PixKey: key})
	require.NoError(t, err)
	_, err = ValidateDestination(providers.OpPixTransfer, &providers.Destination{BankAccount: acct})
	require.NoError(t, err)
	_, err = ValidateDestination(providers.OpBankPayout, &providers.Destination{BankAccount: acct, HolderTaxID: "529.982.247-25"})
	require.NoError(t, err)

	fieldOf := func(err error) string {
		var fe *FieldError
		require.True(t, errors.As(err, &fe), "%v", err)
		return fe.Field
	}
	_, err = ValidateDestination(providers.OpBankPayout, &providers.Destination{PixKey: key})
	require.Equal(t, "destination.pix_key", fieldOf(err))
	_, err = ValidateDestination(providers.OpPixTransfer, &providers.Destination{PixKey: key, BankAccount: acct})
	require.Equal(t, "destination", fieldOf(err))
	_, err = ValidateDestination(providers.OpPixTransfer, &providers.Destination{})
	require.Equal(t, "destination", fieldOf(err))
	_, err = ValidateDestination(providers.OpPixTransfer, nil)
	require.Equal(t, "destination", fieldOf(err))
	_, err = ValidateDestination(providers.OpPixTransfer, &providers.Destination{PixKey: key, HolderTaxID: "123"})
	require.Equal(t, "destination.holder_tax_id", fieldOf(err))
}

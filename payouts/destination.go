package payouts

import (
	"errors"
	"fmt"
	"net/mail"
	"regexp"
	"strings"

	"github.com/saldo/saldo/providers"
)

// FieldError is a validation error that names the offending field, so the API
// can say exactly what to fix. errors.Is(err, ErrInvalid) holds for it.
type FieldError struct {
	Field  string // JSON path of the field, e.g. "destination.pix_key.value"
	Reason string
}

func (e *FieldError) Error() string { return fmt.Sprintf("payouts: invalid %s: %s", e.Field, e.Reason) }

// Is makes every FieldError match ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Pix key types (DICT).
const (
	PixKeyCPF   = "cpf"
	PixKeyCNPJ  = "cnpj"
	PixKeyEmail = "email"
	PixKeyPhone = "phone"
	PixKeyEVP   = "evp" // random key, a UUID
)

// Bank account types.
const (
	AccountChecking = "checking"
	AccountSavings  = "savings"
	AccountPayment  = "payment"
	AccountSalary   = "salary"
)

var (
	digitsRe = regexp.MustCompile(`^[0-9]+$`)
	// +55, two-digit area code (11-99), then 8 or 9 digits (mobiles start with 9).
	phoneRe = regexp.MustCompile(`^\+55[1-9][1-9](9[0-9]{8}|[2-8][0-9]{7})$`)
	evpRe   = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

// nilEVP is the nil UUID: it matches the EVP form but DICT never issues it.
const nilEVP = "00000000-0000-0000-0000-000000000000"

// ValidatePixKey checks a Pix key of the given type and returns it in its
// canonical form (digits only for CPF/CNPJ, lowercase e-mail and EVP). field
// prefixes the names in errors.
func ValidatePixKey(field string, k providers.PixKey) (providers.PixKey, error) {
	v := strings.TrimSpace(k.Value)
	switch k.Type {
	case PixKeyCPF:
		d := stripPunct(v, ".-")
		if !validCPF(d) {
			return k, invalid(field+".value", "not a valid CPF (11 digits with valid check digits)")
		}
		return providers.PixKey{Type: k.Type, Value: d}, nil
	case PixKeyCNPJ:
		d := stripPunct(v, "./-")
		if !validCNPJ(d) {
			return k, invalid(field+".value", "not a valid CNPJ (14 digits with valid check digits)")
		}
		return providers.PixKey{Type: k.Type, Value: d}, nil
	case PixKeyEmail:
		if len(v) > 77 { // DICT limit
			return k, invalid(field+".value", "e-mail longer than 77 characters")
		}
		a, err := mail.ParseAddress(v)
		if err != nil || a.Address != v || a.Name != "" || !strings.Contains(v[strings.LastIndexByte(v, '@')+1:], ".") {
			return k, invalid(field+".value", "not a valid e-mail address")
		}
		return providers.PixKey{Type: k.Type, Value: strings.ToLower(v)}, nil
	case PixKeyPhone:
		if !phoneRe.MatchString(v) {
			return k, invalid(field+".value", "not a Brazilian phone in E.164 (+55, area code, 8 or 9 digits)")
		}
		return providers.PixKey{Type: k.Type, Value: v}, nil
	case PixKeyEVP:
		lv := strings.ToLower(v)
		if !evpRe.MatchString(lv) {
			return k, invalid(field+".value", "not a random key (UUID, 36 characters)")
		}
		if lv == nilEVP {
			return k, invalid(field+".value", "the nil UUID is not a random key")
		}
		return providers.PixKey{Type: k.Type, Value: lv}, nil
	case "":
		return k, invalid(field+".type", "required (cpf, cnpj, email, phone or evp)")
	default:
		return k, invalid(field+".type", "unknown Pix key type %q (cpf, cnpj, email, phone or evp)", k.Type)
	}
}

// ValidateBankAccount checks a Brazilian bank account: ISPB of 8 digits,
// branch of 1-4 digits, account of 1-20 digits (check digit included, an
// optional "-" before it is removed), and a known account type.
func ValidateBankAccount(field string, a providers.BankAccount) (providers.BankAccount, error) {
	out := providers.BankAccount{
		ISPB:    strings.TrimSpace(a.ISPB),
		Branch:  strings.TrimSpace(a.Branch),
		Account: stripPunct(strings.TrimSpace(a.Account), "-"),
		Type:    a.Type,
	}
	switch {
	case len(out.ISPB) != 8 || !digitsRe.MatchString(out.ISPB):
		return a, invalid(field+".ispb", "must be 8 digits")
	case len(out.Branch) < 1 || len(out.Branch) > 4 || !digitsRe.MatchString(out.Branch):
		return a, invalid(field+".branch", "must be 1 to 4 digits")
	case len(out.Account) < 2 || len(out.Account) > 20 || !digitsRe.MatchString(out.Account):
		return a, invalid(field+".account", "must be 2 to 20 digits including the check digit")
	}
	switch out.Type {
	case AccountChecking, AccountSavings, AccountPayment, AccountSalary:
	case "":
		return a, invalid(field+".type", "required (checking, savings, payment or salary)")
	default:
		return a, invalid(field+".type", "unknown account type %q (checking, savings, payment or salary)", out.Type)
	}
	return out, nil
}

// ValidateDestination checks a destination for op: a Pix transfer takes a Pix
// key or a bank account; a bank payout takes a Brazilian bank account or a
// bank account attached to the platform's Stripe account
// (stripe_bank_account "ba_...", issue 14); an account transfer takes a
// Stripe connected account (stripe_account "acct_...") and nothing else.
// Which provider pays which kind is routing's business (providers.Routes,
// Capabilities.Destinations).
func ValidateDestination(op providers.Operation, d *providers.Destination) (*providers.Destination, error) {
	if d == nil {
		return nil, invalid("destination", "required")
	}
	out := &providers.Destination{HolderName: strings.TrimSpace(d.HolderName)}
	if chars(out.HolderName) > 140 {
		return nil, invalid("destination.holder_name", "longer than 140 characters")
	}
	if d.HolderTaxID != "" {
		t := stripPunct(strings.TrimSpace(d.HolderTaxID), "./-")
		if !validCPF(t) && !validCNPJ(t) {
			return nil, invalid("destination.holder_tax_id", "not a valid CPF or CNPJ")
		}
		out.HolderTaxID = t
	}
	kinds := 0
	for _, set := range []bool{d.PixKey != nil, d.BankAccount != nil, d.StripeAccount != "", d.StripeBankAccount != ""} {
		if set {
			kinds++
		}
	}
	switch {
	case kinds > 1:
		return nil, invalid("destination", "give exactly one of pix_key, bank_account, stripe_account or stripe_bank_account")
	case op == providers.OpAccountTransfer && d.StripeAccount == "":
		return nil, invalid("destination", "an account_transfer needs a stripe_account")
	case d.PixKey != nil:
		if op != providers.OpPixTransfer {
			return nil, invalid("destination.pix_key", "a bank payout needs a bank_account or a stripe_bank_account")
		}
		k, err := ValidatePixKey("destination.pix_key", *d.PixKey)
		if err != nil {
			return nil, err
		}
		out.PixKey = &k
	case d.BankAccount != nil:
		a, err := ValidateBankAccount("destination.bank_account", *d.BankAccount)
		if err != nil {
			return nil, err
		}
		out.BankAccount = &a
	case d.StripeAccount != "":
		if op != providers.OpAccountTransfer {
			return nil, invalid("destination.stripe_account", "a connected account is paid by an account_transfer")
		}
		if !stripeAccountRe.MatchString(d.StripeAccount) {
			return nil, invalid("destination.stripe_account", "not a Stripe connected account id (acct_ followed by letters and digits)")
		}
		out.StripeAccount = d.StripeAccount
	case d.StripeBankAccount != "":
		if op != providers.OpBankPayout {
			return nil, invalid("destination.stripe_bank_account", "a bank account of the Stripe account is paid by a bank_payout")
		}
		if !stripeBankAccountRe.MatchString(d.StripeBankAccount) {
			return nil, invalid("destination.stripe_bank_account",
				"not a Stripe external bank account id (ba_ followed by letters and digits)")
		}
		out.StripeBankAccount = d.StripeBankAccount
	default:
		return nil, invalid("destination", "needs a pix_key, a bank_account, a stripe_account or a stripe_bank_account")
	}
	return out, nil
}

var (
	// stripeAccountRe is a Stripe connected account id.
	stripeAccountRe = regexp.MustCompile(`^acct_[A-Za-z0-9]{1,250}$`)
	// stripeBankAccountRe is the id of an external bank account attached
	// to the platform's Stripe account.
	stripeBankAccountRe = regexp.MustCompile(`^ba_[A-Za-z0-9]{1,250}$`)
)

func stripPunct(s, cut string) string {
	return strings.Map(func(r rune) rune {
		if strings.ContainsRune(cut, r) {
			return -1
		}
		return r
	}, s)
}

// validCPF checks 11 digits and the two mod-11 check digits; sequences of one
// repeated digit are invalid even though their check digits compute.
func validCPF(d string) bool {
	if len(d) != 11 || !digitsRe.MatchString(d) || allSame(d) {
		return false
	}
	return checkDigit(d[:9], 10) == d[9] && checkDigit(d[:10], 11) == d[10]
}

// checkDigit computes a CPF check digit with weights from start down to 2.
func checkDigit(d string, start int) byte {
	sum := 0
	for i := range len(d) {
		sum += int(d[i]-'0') * (start - i)
	}
	r := sum * 10 % 11
	if r == 10 {
		r = 0
	}
	return byte('0' + r)
}

// validCNPJ checks 14 digits and the two check digits (weights 5..2,9..2 and
// 6..2,9..2).
func validCNPJ(d string) bool {
	if len(d) != 14 || !digitsRe.MatchString(d) || allSame(d) {
		return false
	}
	w1 := []int{5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2}
	w2 := []int{6, 5, 4, 3, 2, 9, 8, 7, 6, 5, 4, 3, 2}
	return cnpjDigit(d[:12], w1) == d[12] && cnpjDigit(d[:13], w2) == d[13]
}

func cnpjDigit(d string, w []int) byte {
	sum := 0
	for i := range len(d) {
		sum += int(d[i]-'0') * w[i]
	}
	r := sum % 11
	if r < 2 {
		return '0'
	}
	return byte('0' + 11 - r)
}

func allSame(d string) bool {
	return strings.Count(d, d[:1]) == len(d)
}

// ErrInvalid matches every validation error of this package.
var ErrInvalid = errors.New("payouts: invalid request")

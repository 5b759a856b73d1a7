package stripe_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/stripe"
	"github.com/saldo/saldo/providers/stripe/stripefake"
)

// R16: Identity names the account the key belongs to (GET /v1/account)
// and the key's mode, never the key; a rotated key of the same account has
// the same identity, another account's key another one.
func TestIdentityNamesTheKeysAccountAndMode_R16(t *testing.T) {
	const rotated = "sk_test_RotatedKeyOfTheSameAccount"
	f := stripefake.New(testKey, stripefake.WithAccount("acct_1Saldo"), stripefake.WithKeys(rotated))
	t.Cleanup(f.Close)
	other := stripefake.New("sk_live_OtherAccountKey", stripefake.WithAccount("acct_2Other"))
	t.Cleanup(other.Close)

	id, err := newProvider(t, f.URL()).Identity(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := "stripe account acct_1Saldo (test mode)"; id.Account != want {
		t.Fatalf("identity %q, want %q", id.Account, want)
	}
	if strings.Contains(id.Account+id.Config, testKey) || string(id.Secret) != testKey {
		t.Fatalf("the key must be in Secret only: %+v", id)
	}
	id2, err := newProvider(t, f.URL(), func(c *stripe.Config) { c.APIKey = rotated }).Identity(context.Background())
	if err != nil || id2.Account != id.Account {
		t.Fatalf("a rotated key of the same account: %q %v, want %q", id2.Account, err, id.Account)
	}
	id3, err := newProvider(t, other.URL(), func(c *stripe.Config) { c.APIKey = "sk_live_OtherAccountKey" }).Identity(context.Background())
	if err != nil || !strings.Contains(id3.Account, "acct_2Other (live mode)") {
		t.Fatalf("another account: %q %v", id3.Account, err)
	}
	if f.Requests("GET /v1/account") != 2 {
		t.Fatalf("one exchange per Identity, got %d", f.Requests("GET /v1/account"))
	}
}

// R16, issue 20: when Stripe does not say (unreachable, a refused key),
// Identity returns ErrIdentityUnknown with the configuration still set,
// for the fingerprint; it honours ctx.
func TestIdentityUnknownKeepsTheConfiguration_R16(t *testing.T) {
	f := stripefake.New("sk_test_AnotherKeyEntirely")
	t.Cleanup(f.Close)
	id, err := newProvider(t, f.URL()).Identity(context.Background())
	if !errors.Is(err, stripe.ErrIdentityUnknown) || id.Account != "" || id.Config == "" || id.Secret == "" {
		t.Fatalf("a refused key: %+v %v", id, err)
	}
	if strings.Contains(err.Error(), testKey) {
		t.Fatalf("the error shows the key: %v", err)
	}
	f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	// A listener that never answers: the connection is taken by the
	// kernel, the answer never comes.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	p := newProvider(t, "http://"+ln.Addr().String(), func(c *stripe.Config) {
		c.HTTP = providers.HTTPSettings{ConnectTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second}
	})
	if _, err := p.Identity(ctx); !errors.Is(err, stripe.ErrIdentityUnknown) {
		t.Fatalf("no answer: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("Identity ignored ctx: %s", time.Since(start))
	}
}

// stripe-mock serves GET /v1/account too: the adapter reads its answer.
func TestIdentityAgainstStripeMock_R16(t *testing.T) {
	id, err := newProvider(t, stripeMock(t)).Identity(context.Background())
	if err != nil || !strings.HasPrefix(id.Account, "stripe account acct_") {
		t.Fatalf("stripe-mock: %+v %v", id, err)
	}
}

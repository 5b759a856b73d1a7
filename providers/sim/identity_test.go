package sim_test

import (
	"context"
	"testing"

	"github.com/saldo/saldo/providers/sim"
)

// R16: a sim's identity is its base URL (each sim keeps its own
// operations), the same with or without a trailing slash; the webhook
// secret only in Secret.
func TestIdentityIsTheBaseURL_R16(t *testing.T) {
	a, _ := sim.NewProvider("http://127.0.0.1:8089/", sim.WithWebhookSecret("whsec")).Identity(context.Background())
	b, _ := sim.NewProvider("http://127.0.0.1:8089").Identity(context.Background())
	c, _ := sim.NewProvider("http://127.0.0.1:8090").Identity(context.Background())
	if a.Account != "sim at http://127.0.0.1:8089" || a.Account != b.Account || c.Account == a.Account {
		t.Fatalf("identities %q %q %q", a.Account, b.Account, c.Account)
	}
	if string(a.Secret) != "whsec" || a.Config == "" {
		t.Fatalf("%+v", a)
	}
}

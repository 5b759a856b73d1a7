package pix_test

import (
	"context"
	"strings"
	"testing"

	"github.com/saldo/saldo/providers/pix"
	"github.com/saldo/saldo/providers/pix/pixtest"
)

// R16: a Pix PSP's identity is its API hosts, client id and Pix keys, from
// the configuration (no request), never its secrets; another client id or
// another key is another account.
func TestIdentityIsHostsClientIDAndKeys_R16(t *testing.T) {
	e := newEnv(t, pixtest.Options{})
	id, err := e.p.Identity(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{clientID, receivingKey, "https://"} {
		if !strings.Contains(id.Account, want) {
			t.Fatalf("identity %q lacks %q", id.Account, want)
		}
	}
	if strings.Contains(id.Account+id.Config, clientSecret) || strings.Contains(id.Account+id.Config, hookSecret) ||
		string(id.Secret) != clientSecret {
		t.Fatalf("the client secret must be in Secret only, the webhook secret nowhere: %+v", id)
	}
	if len(e.srv.Requests()) != 0 {
		t.Fatalf("Identity made %d requests", len(e.srv.Requests()))
	}
	for _, mod := range []func(*pix.Config){
		func(c *pix.Config) { c.ClientID = "another-client" },
		func(c *pix.Config) { c.ReceivingKey = "outra@example.com" },
	} {
		other, _ := e.adapter(mod).Identity(context.Background())
		if other.Account == id.Account {
			t.Fatalf("another account, same identity %q", id.Account)
		}
	}
}

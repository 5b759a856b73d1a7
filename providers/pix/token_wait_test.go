package pix_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/pix"
	"github.com/saldo/saldo/providers/pix/pixtest"
)

// R2, R3: while one call's token fetch hangs (the PSP's token endpoint
// down, each fetch cut only at connect + TLS + read), another call whose
// deadline passes returns at once, not sent, instead of waiting behind the
// fetch past its deadline: during such an outage every River worker
// calling this PSP would otherwise be held. The token the hung fetch
// finally gets then serves the next call.
func TestTokenWaitEndsWithTheCallersContext_R2(t *testing.T) {
	e := newEnv(t, pixtest.Options{})
	entered, release := make(chan struct{}, 8), make(chan struct{})
	// The token endpoint hangs until released, then passes the request on
	// to the fake PSP's own (over mutual TLS, as the adapter would).
	upstream, err := url.Parse(e.srv.TokenURL())
	if err != nil {
		t.Fatal(err)
	}
	upstream.Path = ""
	proxy := httputil.NewSingleHostReverseProxy(upstream)
	proxy.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: e.certs.CA, Certificates: []tls.Certificate{e.certs.Client}}}
	token := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		proxy.ServeHTTP(w, r)
	}))
	token.TLS = &tls.Config{Certificates: []tls.Certificate{e.certs.Server}}
	token.StartTLS()
	defer token.Close()
	defer close(release)
	p := e.adapter(func(c *pix.Config) {
		c.TokenURL = token.URL + pixtest.TokenPath
		c.HTTP = providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: time.Minute}
	})
	submit := func(ctx context.Context, reference string) providers.SubmitResult {
		payload, err := p.EncodePayload(providers.OperationInput{Operation: providers.OpPixCharge, Amount: "10.5",
			Currency: "BRL", ExpiresIn: time.Hour, PayerTaxID: "12345678909", PayerName: "Fulano de Tal"}, reference)
		if err != nil {
			t.Fatal(err)
		}
		return p.Submit(ctx, providers.SubmitRequest{Operation: providers.OpPixCharge, IdempotencyKey: "k-" + reference,
			Reference: reference, Payload: payload})
	}

	first := make(chan providers.SubmitResult, 1)
	go func() { first <- submit(context.Background(), ref(t)) }()
	<-entered // the first call's fetch hangs in the token endpoint

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	second := make(chan providers.SubmitResult, 1)
	go func() { second <- submit(ctx, ref(t)) }()
	select {
	case sr := <-second:
		if out := attempts.Classify(sr); out != attempts.OutcomeNotSent {
			t.Fatalf("second call: %s (%v), want not sent", out, sr.Exchange.Err)
		}
		if !errors.Is(sr.Exchange.Err, context.DeadlineExceeded) {
			t.Fatalf("second call's error %v, want its deadline", sr.Exchange.Err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second call waited behind the first one's token fetch past its own deadline")
	}
	select {
	case <-first:
		t.Fatal("the first call returned while its token fetch hung")
	default:
	}
	release <- struct{}{}
	if sr := <-first; attempts.Classify(sr) != attempts.OutcomeSucceeded {
		t.Fatalf("first call: %s (%v)", attempts.Classify(sr), sr.Exchange.Err)
	}
	if sr := submit(context.Background(), ref(t)); attempts.Classify(sr) != attempts.OutcomeSucceeded {
		t.Fatalf("third call, on the cached token: %s (%v)", attempts.Classify(sr), sr.Exchange.Err)
	}
	if len(entered) != 0 {
		t.Fatalf("%d more token fetches: the third call did not use the cached token", len(entered))
	}
}

package sim_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func newRef() string { return strings.ReplaceAll(uuid.NewString(), "-", "") }

// fastHTTP: short timeouts so hang tests take milliseconds.
var fastHTTP = providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: 2 * time.Second}

func setup(t *testing.T, cfg sim.Config, opts ...sim.Option) (*sim.Server, *sim.Provider) {
	t.Helper()
	srv := sim.NewServer(cfg).Start()
	t.Cleanup(srv.Close)
	p := srv.NewProvider(append([]sim.Option{sim.WithHTTPSettings(fastHTTP)}, opts...)...)
	return srv, p
}

func transfer(amount string) providers.OperationInput {
	return providers.OperationInput{
		Operation: providers.OpPixTransfer, Amount: amount, Currency: "BRL",
		Destination: &providers.Destination{PixKey: &providers.PixKey{Type: "email", Value: "ana@example.com"}},
	}
}

func payout(amount string) providers.OperationInput {
	return providers.OperationInput{
		Operation: providers.OpBankPayout, Amount: amount, Currency: "BRL",
		Destination: &providers.Destination{BankAccount: &providers.BankAccount{ISPB: "60701190", Branch: "0001",
			Account: "123456-7", Type: "checking"}},
	}
}

func cardCharge(amount, token string) providers.OperationInput {
	return providers.OperationInput{Operation: providers.OpCardCharge, Amount: amount, Currency: "BRL", CardToken: token}
}

// attempt is one attempt: its key, reference and encoded payload.
type attempt struct {
	op   providers.Operation
	key  string
	ref  string
	body []byte
}

func open(t *testing.T, p *sim.Provider, in providers.OperationInput) attempt {
	t.Helper()
	ref := newRef()
	body, err := p.EncodePayload(in, ref)
	require.NoError(t, err)
	return attempt{op: in.Operation, key: "key_" + newRef(), ref: ref, body: body}
}

func (a attempt) send(p *sim.Provider) providers.SubmitResult {
	return p.Submit(context.Background(), providers.SubmitRequest{Operation: a.op, IdempotencyKey: a.key,
		Reference: a.ref, Payload: a.body})
}

func flush(t *testing.T, srv *sim.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, srv.FlushWebhooks(ctx))
}

// receiver is a webhook endpoint that records what it gets and fails the
// first failFirst deliveries with 500.
type receiver struct {
	*httptest.Server
	mu        sync.Mutex
	failFirst int
	calls     int
	got       []received
}

type received struct {
	header http.Header
	body   []byte
	status int
}

func newReceiver(t *testing.T, failFirst int) *receiver {
	rc := &receiver{failFirst: failFirst}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.calls++
		status := http.StatusOK
		if rc.calls <= rc.failFirst {
			status = http.StatusInternalServerError
		}
		rc.got = append(rc.got, received{header: r.Header.Clone(), body: b, status: status})
		rc.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) received() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

// delivered parses the successfully delivered events with p.
func (rc *receiver) delivered(t *testing.T, p *sim.Provider, now time.Time) []providers.WebhookEvent {
	t.Helper()
	var out []providers.WebhookEvent
	for _, r := range rc.received() {
		if r.status != http.StatusOK {
			continue
		}
		ev, err := p.ParseWebhook(r.header, r.body, now)
		require.NoError(t, err)
		out = append(out, ev)
	}
	return out
}

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
	return resp.StatusCode
}

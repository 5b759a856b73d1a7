package stripe_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/stripe"
	"github.com/saldo/saldo/providers/stripe/stripefake"
)

// StripeMockVersion is the stripe-mock module version the tests run
// (.ci/run installs the same one).
const StripeMockVersion = "v0.203.0"

const testKey = "sk_test_4eC39HqLyjWDarjtT1zdp7dcSaldo"

var mock struct {
	once sync.Once
	url  string
	err  error
	cmd  *exec.Cmd
}

func TestMain(m *testing.M) {
	code := m.Run()
	if mock.cmd != nil && mock.cmd.Process != nil {
		_ = mock.cmd.Process.Kill()
		_ = mock.cmd.Wait()
	}
	os.Exit(code)
}

// stripeMock starts stripe-mock once per test binary on a free loopback
// port and returns its base URL. The binary is $(go env GOPATH)/bin/
// stripe-mock; when it is missing the helper runs go install itself. It
// never skips: a test that needs stripe-mock fails without it.
func stripeMock(t *testing.T) string {
	t.Helper()
	mock.once.Do(func() { mock.url, mock.err = startStripeMock() })
	if mock.err != nil {
		t.Fatalf("stripe-mock: %v", mock.err)
	}
	return mock.url
}

func startStripeMock() (string, error) {
	out, err := exec.Command("go", "env", "GOPATH").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOPATH: %w", err)
	}
	gopath := strings.TrimSpace(strings.Split(string(out), string(os.PathListSeparator))[0])
	bin := filepath.Join(gopath, "bin", "stripe-mock")
	if gobin, err := exec.Command("go", "env", "GOBIN").Output(); err == nil && strings.TrimSpace(string(gobin)) != "" {
		bin = filepath.Join(strings.TrimSpace(string(gobin)), "stripe-mock")
	}
	if _, err := os.Stat(bin); err != nil {
		install := exec.Command("go", "install", "github.com/stripe/stripe-mock@"+StripeMockVersion)
		if b, err := install.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go install stripe-mock: %v: %s", err, b)
		}
	}
	cmd := exec.Command(bin, "-http-addr", "127.0.0.1:", "-https-addr", "127.0.0.1:")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start %s: %w", bin, err)
	}
	mock.cmd = cmd
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "Listening for HTTP at address: "); ok {
				found <- strings.TrimSpace(addr)
			}
		}
	}()
	select {
	case addr := <-found:
		return "http://" + addr, nil
	case <-time.After(60 * time.Second):
		return "", fmt.Errorf("stripe-mock did not say where it listens within 60s")
	}
}

// newProvider builds the adapter against base.
func newProvider(t *testing.T, base string, mod ...func(*stripe.Config)) *stripe.Provider {
	t.Helper()
	cfg := stripe.Config{APIKey: testKey, WebhookSecret: "whsec_test_secret", BaseURL: base,
		HTTP: providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: 5 * time.Second}}
	for _, m := range mod {
		m(&cfg)
	}
	p, err := stripe.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newFake starts a stripefake Stripe and an adapter for it.
func newFake(t *testing.T, opts ...stripefake.Option) (*stripefake.Server, *stripe.Provider) {
	t.Helper()
	f := stripefake.New(testKey, opts...)
	t.Cleanup(f.Close)
	return f, newProvider(t, f.URL())
}

var refSeq struct {
	sync.Mutex
	n int
}

// ref makes a reference of the attempts core's form (32 lowercase hex).
func ref() string {
	refSeq.Lock()
	defer refSeq.Unlock()
	refSeq.n++
	return fmt.Sprintf("%032x", time.Now().UnixNano()+int64(refSeq.n))
}

func key() string { return "key-" + ref() }

// submit encodes in and sends it once with k.
func submit(t *testing.T, p *stripe.Provider, in providers.OperationInput, reference, k string) providers.SubmitResult {
	t.Helper()
	body, err := p.EncodePayload(in, reference)
	if err != nil {
		t.Fatalf("EncodePayload: %v", err)
	}
	return p.Submit(context.Background(), providers.SubmitRequest{Operation: in.Operation, IdempotencyKey: k,
		Reference: reference, Payload: body})
}

func charge(amount, cur, pm string) providers.OperationInput {
	return providers.OperationInput{Operation: providers.OpCardCharge, Amount: amount, Currency: cur, CardToken: pm,
		Description: "order 42", Metadata: map[string]string{"saldo_charge_id": "c1"}}
}

func refund(pi, amount, cur string) providers.OperationInput {
	return providers.OperationInput{Operation: providers.OpRefund, Amount: amount, Currency: cur, ChargeProviderID: pi,
		Metadata: map[string]string{"saldo_payout_id": "r1"}}
}

func transfer(acct, amount, cur string) providers.OperationInput {
	return providers.OperationInput{Operation: providers.OpAccountTransfer, Amount: amount, Currency: cur,
		Destination: &providers.Destination{StripeAccount: acct}, Metadata: map[string]string{"saldo_payout_id": "s1"}}
}

// payoutBankAccount is the external bank account (attached to the
// platform's Stripe account) the test payouts go to.
const payoutBankAccount = "ba_1SaldoWeeklyPayout"

func payout(amount, cur string) providers.OperationInput {
	return providers.OperationInput{Operation: providers.OpBankPayout, Amount: amount, Currency: cur,
		Destination: &providers.Destination{StripeBankAccount: payoutBankAccount},
		Description: "weekly", Metadata: map[string]string{"saldo_payout_id": "p1"}}
}

// logBuffer is a slog logger writing into a buffer.
func logBuffer() (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return slog.New(slog.NewTextHandler(&lockedWriter{w: &buf}, &slog.HandlerOptions{Level: slog.LevelDebug})), &buf
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

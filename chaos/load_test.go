package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// request is one logical client request (one Idempotency-Key) and what
// became of it.
type request struct {
	Merchant string
	Kind     string // pix_transfer, bank_payout, split, card_charge, pix_charge, refund, funding, bad
	Key      string
	Path     string
	Body     string
	Bad      bool // malformed or invalid input: must be refused (4xx)
	Over     bool // beyond the balance: must be refused (422)
	// Final answer: the first that is neither a transport error, a 5xx,
	// a 409 request_in_progress nor a 429. Status 0: never answered.
	Status int
	ID     string // the object id of a 2xx
	Answer string // the final answer's body (up to 4000 bytes)
	Amount string // fundings: the amount added
}

// stats counts what clients saw.
type stats struct {
	exchanges      atomic.Int64
	transportErrs  atomic.Int64
	fiveXX         atomic.Int64
	inProgress     atomic.Int64
	replays        atomic.Int64
	concurrentDups atomic.Int64
	keyReuses      atomic.Int64
	pixPaid        atomic.Int64
	pixPayGaveUp   atomic.Int64

	mu         sync.Mutex
	requests   []*request
	violations []string
	fiveXXBody map[string]int // status + body prefix -> count
}

func (s *stats) add(r *request) {
	s.mu.Lock()
	s.requests = append(s.requests, r)
	s.mu.Unlock()
}

func (s *stats) violate(format string, args ...any) {
	s.mu.Lock()
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
	s.mu.Unlock()
}

func (s *stats) saw5xx(status int, body []byte) {
	s.fiveXX.Add(1)
	var pb struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(body, &pb)
	k := strconv.Itoa(status) + " " + strings.TrimPrefix(pb.Type, "https://saldo.dev/problems/")
	if pb.Type == "" {
		k = strconv.Itoa(status) + " " + string(body[:min(len(body), 80)])
	}
	s.mu.Lock()
	if s.fiveXXBody == nil {
		s.fiveXXBody = map[string]int{}
	}
	s.fiveXXBody[k]++
	s.mu.Unlock()
}

// apiClient is a client of the two API processes: it retries a request with
// the same Idempotency-Key on transport errors, 5xx, 409 in progress and
// 429, switching process, as a careful client would.
type apiClient struct {
	bases  []string
	http   *http.Client
	st     *stats
	budget time.Duration // how long one request is retried before the client gives up
}

type answer struct {
	status int
	body   []byte
}

func (a *apiClient) once(ctx context.Context, base, method, path, auth, key, body string) (answer, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+auth)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	a.st.exchanges.Add(1)
	resp, err := a.http.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return answer{}, err
	}
	return answer{status: resp.StatusCode, body: b}, nil
}

// do sends until a final answer or the budget ends (status 0).
func (a *apiClient) do(ctx context.Context, rng *rand.Rand, method, path, auth, key, body string) answer {
	deadline := time.Now().Add(a.budget)
	i := rng.IntN(len(a.bases))
	backoff := 100 * time.Millisecond
	for time.Now().Before(deadline) && ctx.Err() == nil {
		ans, err := a.once(ctx, a.bases[i%len(a.bases)], method, path, auth, key, body)
		switch {
		case err != nil:
			a.st.transportErrs.Add(1)
			i++
		case ans.status >= 500:
			a.st.saw5xx(ans.status, ans.body)
			i++
		case ans.status == http.StatusConflict && bytes.Contains(ans.body, []byte("request_in_progress")),
			ans.status == http.StatusTooManyRequests:
			a.st.inProgress.Add(1)
		default:
			return ans
		}
		time.Sleep(backoff)
		backoff = min(backoff*2, 2*time.Second)
	}
	return answer{}
}

func (a *apiClient) get(ctx context.Context, rng *rand.Rand, path, auth string) (map[string]any, bool) {
	ans := a.do(ctx, rng, http.MethodGet, path, auth, "", "")
	if ans.status != http.StatusOK {
		return nil, false
	}
	var m map[string]any
	return m, json.Unmarshal(ans.body, &m) == nil
}

// idOf is the "id" of a JSON object (a string, or a number for ledger
// transactions).
func idOf(body []byte) string {
	var m struct {
		ID json.RawMessage `json:"id"`
	}
	_ = json.Unmarshal(body, &m)
	return strings.Trim(string(m.ID), `"`)
}

// ---------------------------------------------------------------------------

type merchant struct {
	id, key string
	mu      sync.Mutex
	cards   []string // card and Pix charges answered 201: refund candidates
}

func (m *merchant) addCard(id string) {
	m.mu.Lock()
	m.cards = append(m.cards, id)
	m.mu.Unlock()
}

func (m *merchant) randomCard(rng *rand.Rand) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.cards) == 0 {
		return ""
	}
	return m.cards[rng.IntN(len(m.cards))]
}

// loader runs concurrent clients until ctx ends.
type loader struct {
	api       *apiClient
	admin     string
	merchants []*merchant
	simURL    string // the sim, directly (the payer's bank, not saldo's network)
	pixExpiry int    // seconds
	st        *stats
	seq       atomic.Int64
	payers    sync.WaitGroup
}

func amount(rng *rand.Rand, lo, hi int) string {
	cents := lo*100 + rng.IntN((hi-lo)*100+1)
	return fmt.Sprintf("%d.%02d", cents/100, cents%100)
}

func pixDest(rng *rand.Rand) map[string]any {
	v := fmt.Sprintf("p%d@example.com", rng.IntN(1000))
	if rng.IntN(20) == 0 {
		v = "nokey@sim.invalid" // the receiving bank refuses: failed, released
	}
	return map[string]any{"pix_key": map[string]any{"type": "email", "value": v}}
}

func bankDest(rng *rand.Rand) map[string]any {
	acct := fmt.Sprintf("%06d", 100000+rng.IntN(800000))
	if rng.IntN(20) == 0 {
		acct = "99999999" // account closed: failed, released
	}
	return map[string]any{"bank_account": map[string]any{"ispb": "00000000", "branch": "0001", "account": acct, "type": "checking"}}
}

// badVariant makes a request the API must refuse: it returns a body (or a
// modified path/key) and a label.
func badVariant(rng *rand.Rand, m string) (path, body string, noKey bool) {
	switch rng.IntN(8) {
	case 0:
		return "/v1/merchants/" + m + "/pix-transfers", jsonBody(map[string]any{"amount": "-5.00", "currency": "BRL", "destination": pixDest(rng)}), false
	case 1:
		return "/v1/merchants/" + m + "/pix-transfers", jsonBody(map[string]any{"amount": "5.00", "currency": "XXX", "destination": pixDest(rng)}), false
	case 2:
		return "/v1/merchants/" + m + "/pix-transfers", jsonBody(map[string]any{"amount": "5.00", "currency": "BRL",
			"destination": map[string]any{"pix_key": map[string]any{"type": "cpf", "value": "12"}}}), false
	case 3:
		return "/v1/merchants/" + m + "/pix-transfers", jsonBody(map[string]any{"amount": "5.00", "currency": "BRL", "destination": pixDest(rng)}), true
	case 4:
		return "/v1/merchants/" + m + "/payouts", `{"operation":"bank_payout","amount":"5.00",`, false
	case 5:
		return "/v1/merchants/" + m + "/charges", jsonBody(map[string]any{"kind": "card", "amount": "5.00", "currency": "BRL", "card_token": "4111111111111111"}), false
	case 6:
		return "/v1/merchants/" + m + "/splits", jsonBody(map[string]any{"currency": "BRL", "legs": []any{}}), false
	default:
		return "/v1/merchants/" + m + "/pix-transfers", jsonBody(map[string]any{"amount": "5.001", "currency": "BRL", "destination": pixDest(rng), "surprise": 1}), false
	}
}

func (l *loader) run(ctx context.Context, clients int, seed uint64) {
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(c)+1))
			for ctx.Err() == nil {
				l.one(ctx, rng, c)
				time.Sleep(time.Duration(50+rng.IntN(250)) * time.Millisecond)
			}
		}()
	}
	wg.Wait()
}

func (l *loader) one(ctx context.Context, rng *rand.Rand, client int) {
	m := l.merchants[rng.IntN(len(l.merchants))]
	r := &request{Merchant: m.id, Key: fmt.Sprintf("c%d-%d-%d", client, l.seq.Add(1), rng.Uint32())}
	auth := m.key
	over := rng.IntN(20) == 0
	big := func(a string) string {
		if over {
			return "1000000.00"
		}
		return a
	}
	noKey := false
	switch x := rng.IntN(100); {
	case x < 8:
		r.Kind, r.Bad = "bad", true
		r.Path, r.Body, noKey = badVariant(rng, m.id)
		if noKey {
			r.Key = ""
		}
	case x < 33:
		r.Kind, r.Over = "pix_transfer", over
		r.Path = "/v1/merchants/" + m.id + "/pix-transfers"
		r.Body = jsonBody(map[string]any{"amount": big(amount(rng, 1, 40)), "currency": "BRL", "destination": pixDest(rng)})
	case x < 43:
		r.Kind, r.Over = "bank_payout", over
		r.Path = "/v1/merchants/" + m.id + "/payouts"
		r.Body = jsonBody(map[string]any{"operation": "bank_payout", "amount": big(amount(rng, 1, 40)), "currency": "BRL", "destination": bankDest(rng)})
	case x < 53:
		r.Kind, r.Over = "split", over
		r.Path = "/v1/merchants/" + m.id + "/splits"
		var legs []any
		for i := range 2 + rng.IntN(2) {
			dest := pixDest(rng)
			op := "pix_transfer"
			if i == 1 {
				dest, op = bankDest(rng), "bank_payout"
			}
			legs = append(legs, map[string]any{"operation": op, "amount": big(amount(rng, 1, 15)), "destination": dest})
		}
		r.Body = jsonBody(map[string]any{"currency": "BRL", "legs": legs})
	case x < 73:
		r.Kind = "card_charge"
		tok := "tok_visa"
		if rng.IntN(10) == 0 {
			tok = "tok_decline"
		}
		r.Path = "/v1/merchants/" + m.id + "/charges"
		r.Body = jsonBody(map[string]any{"kind": "card", "amount": amount(rng, 5, 80), "currency": "BRL", "card_token": tok})
	case x < 86:
		r.Kind = "pix_charge"
		r.Path = "/v1/merchants/" + m.id + "/charges"
		r.Body = jsonBody(map[string]any{"kind": "pix", "amount": amount(rng, 5, 80), "currency": "BRL", "pix_expires_in_seconds": l.pixExpiry})
	case x < 97:
		ch := m.randomCard(rng)
		if ch == "" {
			return
		}
		r.Kind, r.Over = "refund", over
		r.Path = "/v1/merchants/" + m.id + "/charges/" + ch + "/refunds"
		amt := amount(rng, 1, 5)
		if over {
			amt = "1000000.00" // beyond the charge: refused
		}
		r.Body = jsonBody(map[string]any{"amount": amt, "currency": "BRL"})
	default:
		r.Kind, auth = "funding", l.admin
		r.Amount = amount(rng, 10, 200)
		r.Path = "/v1/merchants/" + m.id + "/fundings"
		r.Body = jsonBody(map[string]any{"amount": r.Amount, "currency": "BRL", "reason": "chaos top-up"})
	}

	var ans answer
	if !r.Bad && rng.IntN(20) == 0 {
		// The same request twice at once, to both processes.
		l.st.concurrentDups.Add(1)
		var a2 answer
		var wg sync.WaitGroup
		wg.Add(1)
		rng2 := rand.New(rand.NewPCG(rng.Uint64(), 9))
		go func() {
			defer wg.Done()
			a2 = l.api.do(ctx, rng2, http.MethodPost, r.Path, auth, r.Key, r.Body)
		}()
		ans = l.api.do(ctx, rng, http.MethodPost, r.Path, auth, r.Key, r.Body)
		wg.Wait()
		if ans.status != 0 && a2.status != 0 && (ans.status != a2.status || idOf(ans.body) != idOf(a2.body)) {
			l.st.violate("concurrent same-key requests answered differently: %s %s: %d %s vs %d %s", r.Path, r.Key,
				ans.status, idOf(ans.body), a2.status, idOf(a2.body))
		}
	} else {
		ans = l.api.do(ctx, rng, http.MethodPost, r.Path, auth, r.Key, r.Body)
	}
	r.Status = ans.status
	r.Answer = string(ans.body[:min(len(ans.body), 4000)])
	if ans.status/100 == 2 {
		r.ID = idOf(ans.body)
	}
	l.st.add(r)
	if ans.status == 0 {
		return
	}
	switch {
	case r.Bad && ans.status/100 != 4:
		l.st.violate("bad input answered %d (want 4xx): %s %s: %.200s", ans.status, r.Path, r.Body, ans.body)
	case r.Over && ans.status/100 == 2:
		l.st.violate("request beyond the balance answered %d: %s %s", ans.status, r.Path, r.Body)
	}
	if ans.status/100 == 2 {
		switch r.Kind {
		case "card_charge":
			m.addCard(r.ID)
		case "pix_charge":
			l.pay(ctx, m, r.ID, ans.body, rng.IntN(10) < 7)
			m.addCard(r.ID) // refundable once paid (a devolução); refused before

		}
	}
	// Retries with the same key, answered as the first time.
	if r.Key != "" && rng.IntN(6) == 0 {
		l.st.replays.Add(1)
		again := l.api.do(ctx, rng, http.MethodPost, r.Path, auth, r.Key, r.Body)
		if again.status != 0 && (again.status != ans.status || idOf(again.body) != idOf(ans.body)) {
			l.st.violate("retry with the same key answered differently: %s key %s: first %d %s, retry %d %s: %.200s",
				r.Path, r.Key, ans.status, idOf(ans.body), again.status, idOf(again.body), again.body)
		}
	}
	// The same key with another body is refused, and changes nothing.
	if r.Key != "" && ans.status/100 == 2 && r.Kind != "funding" && rng.IntN(25) == 0 {
		l.st.keyReuses.Add(1)
		other := strings.Replace(r.Body, `"currency":"BRL"`, `"currency":"BRL","description":"changed"`, 1)
		reuse := l.api.do(ctx, rng, http.MethodPost, r.Path, auth, r.Key, other)
		if reuse.status != 0 && reuse.status != http.StatusUnprocessableEntity {
			l.st.violate("same key, another body answered %d (want 422): %s: %.200s", reuse.status, r.Path, reuse.body)
		}
	}
}

// pay plays the payer of a Pix charge (or lets it expire), asking the sim
// directly.
func (l *loader) pay(ctx context.Context, m *merchant, chargeID string, created []byte, willPay bool) {
	if !willPay {
		return
	}
	l.payers.Add(1)
	go func() {
		defer l.payers.Done()
		rng := rand.New(rand.NewPCG(uint64(len(chargeID)), uint64(time.Now().UnixNano())))
		var ch struct {
			Reference string `json:"reference"`
		}
		_ = json.Unmarshal(created, &ch)
		deadline := time.Now().Add(time.Duration(l.pixExpiry) * time.Second)
		time.Sleep(time.Duration(300+rng.IntN(2000)) * time.Millisecond)
		client := &http.Client{Timeout: 5 * time.Second}
		for time.Now().Before(deadline) {
			if ch.Reference == "" {
				if got, ok := l.api.get(context.Background(), rng, "/v1/merchants/"+m.id+"/charges/"+chargeID, m.key); ok {
					ch.Reference, _ = got["reference"].(string)
				}
			}
			if ch.Reference != "" {
				resp, err := client.Post(l.simURL+"/sim/cobs/"+ch.Reference+"/pay", "application/json", strings.NewReader(`{}`))
				if err == nil {
					resp.Body.Close()
					switch resp.StatusCode {
					case http.StatusOK:
						l.st.pixPaid.Add(1)
						return
					case http.StatusGone, http.StatusConflict:
						return
					}
				}
			}
			time.Sleep(500 * time.Millisecond)
		}
		l.st.pixPayGaveUp.Add(1)
	}()
}

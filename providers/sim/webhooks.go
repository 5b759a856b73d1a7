package sim

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Webhook headers.
const (
	// SignatureHeader carries "t=<unix seconds>,v1=<hex HMAC-SHA256>" where
	// the HMAC is over "<t>.<raw body>" with the webhook secret.
	SignatureHeader = "Sim-Signature"
	// EventIDHeader repeats the event id (also in the body).
	EventIDHeader = "Sim-Event-Id"
)

// Sign computes the SignatureHeader value for body at t.
func Sign(secret string, t time.Time, body []byte) string {
	return fmt.Sprintf("t=%d,v1=%s", t.Unix(), signature(secret, t.Unix(), body))
}

func signature(secret string, ts int64, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(strconv.FormatInt(ts, 10)))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return hex.EncodeToString(mac.Sum(nil))
}

// parseSignature reads "t=...,v1=...,v1=..." (several v1 during a secret
// rotation).
func parseSignature(h string) (ts int64, sigs []string, ok bool) {
	haveT := false
	for _, part := range strings.Split(h, ",") {
		k, v, found := strings.Cut(strings.TrimSpace(part), "=")
		if !found {
			continue
		}
		switch k {
		case "t":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, nil, false
			}
			ts, haveT = n, true
		case "v1":
			sigs = append(sigs, v)
		}
	}
	return ts, sigs, haveT && len(sigs) > 0
}

// event is the body of a webhook.
type event struct {
	ID        string    `json:"id"`
	Type      string    `json:"type"`
	CreatedAt time.Time `json:"created_at"`
	Data      Operation `json:"data"`
}

// Delivery is one try to deliver one copy of an event, for tests.
type Delivery struct {
	EventID string
	Type    string
	// Copy is 0 for the original, 1 for a duplicate.
	Copy int
	// Attempt counts tries of this copy, from 1.
	Attempt    int
	StatusCode int
	Err        string
	// Delivered: the receiver answered 2xx.
	Delivered bool
	// Dropped: the last allowed attempt failed; this copy is given up.
	Dropped bool
	At      time.Time
}

type delivery struct {
	seq     uint64
	id, typ string
	copy    int
	body    []byte
	attempt int
	due     time.Time
}

// dispatcher delivers events one at a time, in order of due time, so the
// order (and so duplicates and reordering) depends only on the seed and
// the sequence of events.
type dispatcher struct {
	cfg    Config
	client *http.Client
	log    *slog.Logger

	mu      sync.Mutex
	rng     *rand.Rand
	queue   []*delivery
	held    []*delivery
	heldAt  time.Time
	seq     uint64
	pending int
	history []Delivery
	wake    chan struct{}
}

func newDispatcher(cfg Config, seed uint64) *dispatcher {
	return &dispatcher{
		cfg:    cfg,
		client: &http.Client{Timeout: cfg.WebhookTimeout},
		log:    cfg.Logger,
		rng:    rand.New(rand.NewPCG(seed, 0x5EB400C5)),
		wake:   make(chan struct{}, 1),
	}
}

// enqueue schedules ev. Called with the server lock held (ids are drawn
// under it), never takes it.
func (d *dispatcher) enqueue(ev event) {
	body, err := json.Marshal(ev)
	if err != nil { // Operation always marshals; keep the promise of no panics.
		d.log.Error("sim: webhook marshal", "err", err)
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	copies := 1
	if d.cfg.WebhookDuplicateRate > 0 && d.rng.Float64() < d.cfg.WebhookDuplicateRate {
		copies = 2
	}
	due := time.Now().Add(d.cfg.WebhookDelay)
	batch := make([]*delivery, 0, copies)
	for i := range copies {
		d.seq++
		batch = append(batch, &delivery{seq: d.seq, id: ev.ID, typ: ev.Type, copy: i, body: body, due: due})
	}
	d.pending += copies
	switch {
	case len(d.held) > 0:
		// The held event goes after this one.
		d.queue = append(d.queue, batch...)
		d.releaseHeldLocked(due)
	case d.cfg.WebhookReorderRate > 0 && d.rng.Float64() < d.cfg.WebhookReorderRate:
		d.held, d.heldAt = batch, time.Now()
	default:
		d.queue = append(d.queue, batch...)
	}
	d.kick()
}

func (d *dispatcher) releaseHeldLocked(notBefore time.Time) {
	for _, h := range d.held {
		d.seq++
		h.seq = d.seq
		if h.due.Before(notBefore) {
			h.due = notBefore
		}
		d.queue = append(d.queue, h)
	}
	d.held = nil
}

func (d *dispatcher) kick() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// run delivers until ctx is done.
func (d *dispatcher) run(ctx context.Context) {
	for {
		d.mu.Lock()
		if len(d.held) > 0 && time.Since(d.heldAt) >= d.cfg.WebhookHoldMax {
			d.releaseHeldLocked(time.Time{})
		}
		wait := time.Hour
		var next *delivery
		idx := -1
		for i, q := range d.queue {
			if next == nil || q.due.Before(next.due) || (q.due.Equal(next.due) && q.seq < next.seq) {
				next, idx = q, i
			}
		}
		if next != nil {
			wait = time.Until(next.due)
			if wait <= 0 {
				d.queue = append(d.queue[:idx], d.queue[idx+1:]...)
			}
		}
		if len(d.held) > 0 {
			if hw := d.cfg.WebhookHoldMax - time.Since(d.heldAt); hw < wait {
				wait = hw
			}
		}
		d.mu.Unlock()
		if next != nil && wait <= 0 {
			d.send(ctx, next)
			continue
		}
		t := time.NewTimer(max(wait, time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-d.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

func (d *dispatcher) send(ctx context.Context, dl *delivery) {
	dl.attempt++
	rec := Delivery{EventID: dl.id, Type: dl.typ, Copy: dl.copy, Attempt: dl.attempt, At: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.cfg.WebhookURL, bytes.NewReader(dl.body))
	if err == nil {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(EventIDHeader, dl.id)
		req.Header.Set(SignatureHeader, Sign(d.cfg.WebhookSecret, d.cfg.Clock(), dl.body))
		var resp *http.Response
		resp, err = d.client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
			rec.StatusCode = resp.StatusCode
			rec.Delivered = resp.StatusCode >= 200 && resp.StatusCode < 300
		}
	}
	if err != nil {
		rec.Err = err.Error()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !rec.Delivered {
		if dl.attempt < d.cfg.WebhookMaxAttempts && ctx.Err() == nil {
			backoff := d.cfg.WebhookRetryBase << (dl.attempt - 1)
			if backoff > 5*time.Second || backoff <= 0 {
				backoff = 5 * time.Second
			}
			dl.due = time.Now().Add(backoff)
			d.queue = append(d.queue, dl)
			d.history = append(d.history, rec)
			d.log.Warn("sim: webhook delivery failed, will retry", "event", dl.id, "attempt", dl.attempt,
				"status", rec.StatusCode, "err", rec.Err)
			return
		}
		rec.Dropped = true
		d.log.Error("sim: webhook delivery given up", "event", dl.id, "attempts", dl.attempt)
	}
	d.history = append(d.history, rec)
	d.pending--
}

// flush releases held events and waits until every copy was delivered or
// given up.
func (d *dispatcher) flush(ctx context.Context) error {
	d.mu.Lock()
	if len(d.held) > 0 {
		d.releaseHeldLocked(time.Time{})
	}
	d.mu.Unlock()
	d.kick()
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for {
		d.mu.Lock()
		n := d.pending
		d.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sim: %d webhook deliveries still pending: %w", n, ctx.Err())
		case <-t.C:
		}
	}
}

func (d *dispatcher) deliveries() []Delivery {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Delivery(nil), d.history...)
}

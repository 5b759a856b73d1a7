package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/saldo/saldo/internal/sqlcols"
	"github.com/saldo/saldo/ledger"
)

// IdempotencyHeader names the client's key for a POST; responses echo it.
const IdempotencyHeader = "Idempotency-Key"

// ReplayedHeader is "true" on a response replayed from a stored one.
const ReplayedHeader = "Idempotent-Replayed"

// releaseIdempotencyClaim deletes the running claim of (keyID, key) this
// request holds (its token), after an answer that is not stored (a 5xx, a
// panic): the client's retry runs again, and the domain keys below stop
// double effects. A row the handler completed in its own transaction
// (completeIdempotentInTx) is done, not running, and stays: the 5xx came
// after its COMMIT reached the server, and the retry replays its answer.
func (s *Server) releaseIdempotencyClaim(ctx context.Context, c *idemClaim) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM idempotent_requests
		WHERE key_id = $1 AND idem_key = $2 AND state = 'running' AND claim_token = $3`, c.keyID, c.key, c.token)
	switch {
	case err != nil:
		// Not released (or released, if the error came after the
		// commit): a retry finds the claim until its lease passes.
		s.log.ErrorContext(ctx, "api: release idempotency key", "key_id", c.keyID, "error", err)
	case tag.RowsAffected() == 0 && c.inTx != 0:
		s.log.WarnContext(ctx, "api: idempotency key not released: completed in the handler's transaction (its COMMIT's answer was lost) or taken over by a retry",
			"key_id", c.keyID)
	case tag.RowsAffected() == 0:
		s.log.WarnContext(ctx, "api: idempotency key taken over by a retry; its claim left alone", "key_id", c.keyID)
	}
}

// idemClaim is the Idempotency-Key claim a request holds while its handler
// runs, carried in the request's context (claimSlot).
type idemClaim struct {
	keyID, key, token string
	// inTx is the status the handler stored with the row in its own
	// transaction (completeIdempotentInTx); 0 when it did not.
	inTx int
}

type claimSlot struct{}

// errTakenOver: a request that outlived its lease finds, in its own
// transaction, that a retry took its Idempotency-Key over. It rolls back:
// the retry's answer is the one.
var errTakenOver = &apiError{status: http.StatusConflict, code: "request_in_progress", title: "Request in progress",
	detail:     "a retry with this Idempotency-Key took this request over after its lease; this one changed nothing: retry to get the answer",
	retryAfter: 1}

// completeIdempotentInTx completes the request's Idempotency-Key row inside
// the handler's transaction tx, before it commits, with the answer the
// client will get: status, application/json, the headers of header kept
// for replay (replayedHeaders; set them before the call) and replay as the
// body stored. replay is the answer without its secret (a new API key, an
// endpoint's signing secret): saldo never keeps a secret it showed once, so
// a retry learns what was created, without the secret.
//
// For a route whose effect has no key of its own below the API (R4, R5:
// after an error, ask whether it may have committed; never redo blindly):
// the row and the effect commit together, so a COMMIT whose answer was
// lost leaves the row done (the retry replays the answer), and a request
// whose claim a retry took over after the lease gets errTakenOver (409
// request_in_progress), on which the caller rolls back. Without an
// Idempotency-Key it does nothing.
func (s *Server) completeIdempotentInTx(ctx context.Context, tx pgx.Tx, r *http.Request, status int, replay any, header http.Header) error {
	c, ok := r.Context().Value(claimSlot{}).(*idemClaim)
	if !ok {
		return nil
	}
	body, err := json.Marshal(replay)
	if err != nil {
		return fmt.Errorf("api: idempotent answer: %w", err)
	}
	tag, err := tx.Exec(ctx, completeIdempotencySQL, c.keyID, c.key, status, "application/json", body, s.clock.Now(),
		keptHeaders(header), c.token)
	if err != nil {
		return fmt.Errorf("api: complete idempotency key: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return errTakenOver
	}
	c.inTx = status
	return nil
}

// completeIdempotencySQL stores a request's answer, only while its claim
// (claim_token) is still its own.
const completeIdempotencySQL = `UPDATE idempotent_requests SET state = 'done', status = $3, content_type = $4,
	response_body = $5, completed_at = $6, response_headers = $7
	WHERE key_id = $1 AND idem_key = $2 AND state = 'running' AND claim_token = $8`

// keptHeaders are the replayedHeaders of h, stored with an answer.
func keptHeaders(h http.Header) map[string]string {
	kept := map[string]string{}
	for _, k := range replayedHeaders {
		if v := h.Get(k); v != "" {
			kept[k] = v
		}
	}
	return kept
}

// idempotent makes a POST route idempotent per (API key, Idempotency-Key):
//
//   - the first request with a key inserts a 'running' row in its own
//     committed transaction (with a hash of method, path and raw body), runs,
//     and stores its status and body;
//   - a retry with the same request gets the stored status and body back,
//     byte for byte, with Idempotent-Replayed: true;
//   - the same key with a different method, path or body is 422
//     idempotency_key_reused, and nothing runs;
//   - while the first request is still running, 409 request_in_progress
//     (Retry-After: 1);
//   - a 5xx is not stored: the row is deleted so a retry runs again (the
//     domain below has its own keys, so that never doubles an effect);
//   - neither is a refusal of the request's form (400, 413, 415): nothing
//     happened, so the client may fix the body and retry with the same key;
//     domain answers (404, 409, 422 insufficient balance, ...) are stored;
//   - a running row whose lease (Config.IdempotencyLease) passed was left by
//     a request that died mid-way; a retry takes it over and runs again;
//   - every claim carries a random token (claim_token), and a request
//     deletes or completes the row only while the token is its own: a
//     request that outlived its lease and was taken over neither releases
//     the retry's claim nor overwrites the retry's answer.
//
// By default the answer is stored after the handler's transaction
// committed, which is safe only where the domain below has keys of its own
// (payouts, refunds, charges, fundings): a 5xx after a COMMIT whose answer
// was lost, or a request that outlived its lease and was taken over, runs
// the handler twice. A handler with no such key (creating a notification
// endpoint, an API key, a merchant; revoking a key, disabling an endpoint,
// retrying a payout, an operator's resolution or divergence settlement, a
// reconciliation divergence's resolution) completes the row itself, inside
// its own transaction (or, where a domain service owns the transaction, in
// the function the service runs in it: attempts' ResolveManuallyWith and
// SettleDivergenceWith, payouts' RetryWith) and only while it still holds
// the claim (completeIdempotentInTx): it creates or changes nothing once a
// retry took the key over (409 request_in_progress), and after a lost
// COMMIT answer (a 503) the row is done with its answer, which the retry
// replays; the release after a 5xx leaves a done row alone.
//
// Rows are kept for Config.IdempotencyRetention (at least 24 h), then
// CleanupIdempotency deletes them. With required, a POST without the header
// is 400 idempotency_key_required.
func (s *Server) idempotent(required bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key := r.Header.Get(IdempotencyHeader)
			if key == "" {
				if required {
					s.problem(w, r, &apiError{status: http.StatusBadRequest, code: "idempotency_key_required",
						title: "Idempotency-Key required", detail: "this request moves money: send an Idempotency-Key header (a UUID, say) and reuse it on retries"})
					return
				}
				next.ServeHTTP(w, r)
				return
			}
			w.Header().Set(IdempotencyHeader, key)
			if len(key) > 255 || !printableASCII(key) {
				s.problem(w, r, invalidField(IdempotencyHeader, "Idempotency-Key must be 1-255 printable ASCII characters"))
				return
			}
			body, err := s.readBody(w, r)
			if err != nil {
				s.problem(w, r, err)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			h := sha256.New()
			fmt.Fprintf(h, "%s\n%s\n%s\n", r.Method, r.URL.Path, r.URL.RawQuery)
			h.Write(body)
			hash := h.Sum(nil)

			p := principalFrom(r.Context())
			token := randomHex(16)
			stored, err := s.claimIdempotencyKey(r.Context(), p.KeyID, key, token, hash, r)
			if err != nil {
				s.problem(w, r, err)
				return
			}
			if stored != nil {
				for k, v := range stored.headers {
					w.Header().Set(k, v)
				}
				w.Header().Set("Content-Type", stored.contentType)
				w.Header().Set(ReplayedHeader, "true")
				w.WriteHeader(stored.status)
				_, _ = w.Write(stored.body)
				return
			}

			rec := &recorder{header: http.Header{}, status: http.StatusOK}
			claim := &idemClaim{keyID: p.KeyID, key: key, token: token}
			ctx := context.WithoutCancel(r.Context())
			func() {
				// A panic is answered 500 by the recoverer outside this
				// layer: release the claim first, as after any 5xx, so the
				// client's retry is not refused "in progress" for the
				// lease's length.
				defer func() {
					if v := recover(); v != nil {
						s.releaseIdempotencyClaim(ctx, claim)
						panic(v)
					}
				}()
				next.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), claimSlot{}, claim)))
			}()

			switch {
			case claim.inTx != 0 && claim.inTx == rec.status:
				// The handler completed the row in its own transaction
				// (completeIdempotentInTx), which committed.
			case !storable(rec.status):
				s.releaseIdempotencyClaim(ctx, claim)
			default:
				tag, err := s.pool.Exec(ctx, completeIdempotencySQL,
					p.KeyID, key, rec.status, rec.header.Get("Content-Type"), rec.body.Bytes(), s.clock.Now(), keptHeaders(rec.header), token)
				if err == nil && tag.RowsAffected() == 0 {
					// A retry took the key over after our lease: its answer is
					// the one kept (the domain keys make the two one effect
					// where the route has them).
					s.log.WarnContext(ctx, "api: idempotency key taken over by a retry; response not stored", "key_id", p.KeyID,
						"status", rec.status)
				}
				if err != nil {
					// The effect happened; the caller gets its answer. A retry
					// will find the row running until its lease passes, then
					// rerun, and the domain keys make that a replay.
					s.log.ErrorContext(ctx, "api: store idempotent response", "key_id", p.KeyID, "error", err)
				}
			}
			for k, v := range rec.header {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.status)
			_, _ = w.Write(rec.body.Bytes())
		})
	}
}

// storable reports whether a response is kept for replay: not a 5xx (we
// do not know what happened) nor a refusal of the request's form (nothing
// happened).
func storable(status int) bool {
	switch {
	case status >= 500, status == 400, status == 413, status == 415:
		return false
	}
	return true
}

// replayedHeaders are stored with an idempotent response and replayed.
var replayedHeaders = []string{"Location", "Retry-After", "Cache-Control"}

type storedResponse struct {
	status      int
	contentType string
	headers     map[string]string
	body        []byte
}

// claimIdempotencyKey returns (nil, nil) when the caller should run the
// request (the row is then claimed with token), a stored response to
// replay, or a problem.
func (s *Server) claimIdempotencyKey(ctx context.Context, keyID, key, token string, hash []byte, r *http.Request) (*storedResponse, error) {
	now := s.clock.Now()
	lease := now.Add(s.cfg.IdempotencyLease)
	var out *storedResponse
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO idempotent_requests (key_id, idem_key, request_hash, method, path, state, lease_until, created_at, claim_token)
			VALUES ($1, $2, $3, $4, $5, 'running', $6, $7, $8) ON CONFLICT DO NOTHING`,
			keyID, key, hash, r.Method, r.URL.Path, lease, now, token)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		var prevHash, body []byte
		var state string
		var leaseUntil time.Time
		var status *int
		var contentType *string
		var headers map[string]string
		err = tx.QueryRow(ctx, `SELECT request_hash, state, lease_until, status, content_type, response_body, response_headers
			FROM idempotent_requests WHERE key_id = $1 AND idem_key = $2 FOR UPDATE`, keyID, key).
			Scan(&prevHash, &state, &leaseUntil, &status, &contentType, &body, &headers)
		if errors.Is(err, pgx.ErrNoRows) {
			// Deleted (a 5xx) between our insert and read: try again.
			return &apiError{status: http.StatusConflict, code: "request_in_progress", title: "Request in progress",
				detail: "a request with this Idempotency-Key just finished with an error; retry", retryAfter: 1}
		}
		if err != nil {
			return err
		}
		if !bytes.Equal(prevHash, hash) {
			return &apiError{status: http.StatusUnprocessableEntity, code: "idempotency_key_reused", title: "Idempotency key reused",
				detail: "this Idempotency-Key was used with a different request (method, path or body); use a new key for a new request"}
		}
		if state == "done" {
			out = &storedResponse{status: *status, contentType: sqlcols.Deref(contentType), headers: headers, body: body}
			return nil
		}
		if now.Before(leaseUntil) {
			return &apiError{status: http.StatusConflict, code: "request_in_progress", title: "Request in progress",
				detail: "a request with this Idempotency-Key is still running; retry shortly", retryAfter: 1}
		}
		// Take the claim over: the request that held it can no longer
		// release or complete it.
		_, err = tx.Exec(ctx, `UPDATE idempotent_requests SET lease_until = $3, claim_token = $4 WHERE key_id = $1 AND idem_key = $2`,
			keyID, key, lease, token)
		return err
	})
	return out, err
}

// CleanupIdempotency deletes idempotency records older than the retention
// (Config.IdempotencyRetention, at least 24 h) and returns how many. The
// periodic job (PeriodicJobs) runs it hourly.
func (s *Server) CleanupIdempotency(ctx context.Context) (int64, error) {
	return CleanupIdempotency(ctx, s.pool, s.clock.Now().Add(-s.cfg.IdempotencyRetention))
}

// CleanupIdempotency deletes idempotency records created before olderThan:
// finished ones, and running ones whose lease passed (their request died
// and nobody retried). Never pass a time less than 24 hours ago (the
// documented retention).
func CleanupIdempotency(ctx context.Context, db ledger.DBTX, olderThan time.Time) (int64, error) {
	tag, err := db.Exec(ctx, `DELETE FROM idempotent_requests WHERE created_at < $1
		AND (state = 'done' OR lease_until < $1)`, olderThan)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return s != ""
}

// recorder buffers a handler's response so it can be stored before it is
// sent.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
	wrote  bool
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.body.Write(b)
}

// CleanupIdempotencyArgs is the periodic River job that deletes
// idempotency records past the retention.
type CleanupIdempotencyArgs struct {
	// RetentionSeconds: records older than this are deleted (at least 24h).
	RetentionSeconds int64 `json:"retention_seconds"`
}

// Kind is the River job kind.
func (CleanupIdempotencyArgs) Kind() string { return "saldo_cleanup_idempotency" }

// CleanupIdempotencyWorker deletes expired idempotency records.
type CleanupIdempotencyWorker struct {
	river.WorkerDefaults[CleanupIdempotencyArgs]
	Pool   *pgxpool.Pool
	Logger *slog.Logger
}

// Work runs one cleanup.
func (w *CleanupIdempotencyWorker) Work(ctx context.Context, job *river.Job[CleanupIdempotencyArgs]) error {
	retention := max(time.Duration(job.Args.RetentionSeconds)*time.Second, MinIdempotencyRetention)
	n, err := CleanupIdempotency(ctx, w.Pool, time.Now().Add(-retention))
	if err == nil && n > 0 && w.Logger != nil {
		w.Logger.InfoContext(ctx, "api: idempotency records deleted", "count", n, "retention", retention)
	}
	return err
}

// AddWorkers registers the API's River workers (the idempotency cleanup).
// It needs no Server, so it can be wired before the API is built.
func AddWorkers(w *river.Workers, pool *pgxpool.Pool, logger *slog.Logger) {
	river.AddWorker(w, &CleanupIdempotencyWorker{Pool: pool, Logger: logger})
}

// PeriodicJobs returns the hourly idempotency cleanup with the given
// retention (at least 24h).
func PeriodicJobs(retention time.Duration) []*river.PeriodicJob {
	retention = max(retention, MinIdempotencyRetention)
	return []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(time.Hour),
		func() (river.JobArgs, *river.InsertOpts) {
			return CleanupIdempotencyArgs{RetentionSeconds: int64(retention / time.Second)}, nil
		},
		&river.PeriodicJobOpts{ID: "saldo_cleanup_idempotency", RunOnStart: true})}
}

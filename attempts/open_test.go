package attempts

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
)

// TestOpen: key and reference made before any I/O (R4, R13), exact payload
// bytes and their sha256 stored (R5), an event, and the submit job enqueued
// in the same transaction.
func TestOpen(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	subject := newSubject()
	a := h.open(subject)

	require.Equal(t, StatusPending, a.Status)
	require.Equal(t, KindPixTransfer, a.Kind)
	require.Equal(t, subject, a.SubjectID)
	require.Regexp(t, regexp.MustCompile(`^[0-9a-f]{32}$`), a.Reference)
	_, err := uuid.Parse(a.IdempotencyKey)
	require.NoError(t, err)
	want, err := h.prov.EncodePayload(providers.OperationInput{Operation: providers.OpPixTransfer, Amount: "10.50", Currency: "BRL"}, a.Reference)
	require.NoError(t, err)
	require.Equal(t, want, a.Payload)
	sum := sha256.Sum256(want)
	require.Equal(t, hex.EncodeToString(sum[:]), hex.EncodeToString(a.PayloadSHA256))
	require.NotNil(t, a.KeyExpiresAt)
	require.True(t, h.clock.Now().Add(24*time.Hour).Equal(*a.KeyExpiresAt))
	require.Zero(t, h.psp.totalSubmits(), "opening makes no I/O")
	require.Equal(t, []string{"opened"}, eventTypes(h.events(a.ID)))
	require.Equal(t, 1, h.liveJobs(SubmitAttemptKind, a.ID))

	got, err := h.svc.ForSubject(h.ctx, h.pool, subject)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, a.ID, got[0].ID)
	byRef, err := h.svc.GetByReference(h.ctx, h.pool, a.Reference)
	require.NoError(t, err)
	require.Equal(t, a.ID, byRef.ID)
	_, err = h.svc.Get(h.ctx, h.pool, uuid.New())
	require.ErrorIs(t, err, ErrNotFound)
	h.requireNoViolations()
}

// TestOpenRollsBackWithCaller: the attempt and its job live and die with the
// caller's transaction (docs/pitfalls.md: enqueue in the same transaction).
func TestOpenRollsBackWithCaller(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	subject := newSubject()
	tx, err := h.pool.Begin(h.ctx)
	require.NoError(t, err)
	a, err := h.svc.Open(h.ctx, tx, OpenParams{Kind: KindPixTransfer, SubjectID: subject, Provider: "fake",
		Input: providers.OperationInput{Operation: providers.OpPixTransfer, Amount: "1.00", Currency: "BRL"}})
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(h.ctx))
	_, err = h.svc.Get(h.ctx, h.pool, a.ID)
	require.ErrorIs(t, err, ErrNotFound)
	require.Zero(t, h.liveJobs(SubmitAttemptKind, a.ID))
}

func TestOpenRejectsBadInput(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	tx, err := h.pool.Begin(h.ctx)
	require.NoError(t, err)
	defer tx.Rollback(h.ctx) //nolint:errcheck
	good := providers.OperationInput{Operation: providers.OpPixTransfer, Amount: "1.00", Currency: "BRL"}
	for name, p := range map[string]OpenParams{
		"unknown kind":          {Kind: "loan", SubjectID: "s", Provider: "fake", Input: good},
		"empty subject":         {Kind: KindPixTransfer, Provider: "fake", Input: good},
		"unknown provider":      {Kind: KindPixTransfer, SubjectID: "s", Provider: "nope", Input: good},
		"op does not fit kind":  {Kind: KindRefund, SubjectID: "s", Provider: "fake", Input: good},
		"adapter refuses input": {Kind: KindPixTransfer, SubjectID: "s", Provider: "fake", Input: providers.OperationInput{Operation: providers.OpPixTransfer, Amount: "-1", Currency: "BRL"}},
	} {
		_, err := h.svc.Open(h.ctx, tx, p)
		require.ErrorIs(t, err, ErrInvalid, name)
	}
	_, err = h.svc.Open(h.ctx, tx, OpenParams{Kind: KindPixTransfer, SubjectID: "s", Provider: "fake",
		Input: providers.OperationInput{Operation: providers.OpPixTransfer, Amount: "-1", Currency: "BRL"}})
	require.ErrorIs(t, err, providers.ErrInvalidInput, "the adapter's error is kept")
	_, err = tx.Exec(h.ctx, "SELECT 1")
	require.NoError(t, err, "bad input never poisons the caller's transaction")
}

// TestOpenSecondReturnsOpen (R8): a subject with an open attempt gets it back
// with ErrAttemptOpen, and the caller's transaction stays usable.
func TestOpenSecondReturnsOpen(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	subject := newSubject()
	a := h.open(subject)
	b, err := h.openErr(subject)
	require.ErrorIs(t, err, ErrAttemptOpen)
	require.Equal(t, a.ID, b.ID)
	require.Equal(t, a.IdempotencyKey, b.IdempotencyKey)
	// Another direction's subject with the same id is independent.
	c, err := h.openKind(KindCardCharge, subject, "3.00")
	require.NoError(t, err)
	require.NotEqual(t, a.ID, c.ID)
}

// TestOpenRace: many concurrent openers for one subject, exactly one attempt
// (R8: the partial unique index, not an if).
func TestOpenRace(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	subject := newSubject()
	const n = 12
	var wg sync.WaitGroup
	ids := make([]uuid.UUID, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			a, err := h.openErr(subject)
			ids[i], errs[i] = a.ID, err
		}()
	}
	close(start)
	wg.Wait()
	created := 0
	for i := range n {
		if errs[i] == nil {
			created++
		} else {
			require.ErrorIs(t, errs[i], ErrAttemptOpen)
		}
		require.Equal(t, ids[0], ids[i], "every opener continues with the one open attempt")
	}
	require.Equal(t, 1, created)
	var count int
	require.NoError(t, h.pool.QueryRow(h.ctx, `SELECT count(*) FROM attempts WHERE subject_id = $1`, subject).Scan(&count))
	require.Equal(t, 1, count)
	h.requireNoViolations()
}

// TestNewKeyOnlyAfterFailure (R6, R7): after a definitive failure a new
// attempt gets a new key and reference; after success no new attempt opens.
func TestNewKeyOnlyAfterFailure(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{plan: []behaviour{behaveDecline, behaveOK}})
	subject := newSubject()
	first := h.open(subject)
	r, err := h.svc.Execute(h.ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, StatusFailed, r.Attempt.Status)

	second := h.open(subject)
	require.NotEqual(t, first.IdempotencyKey, second.IdempotencyKey)
	require.NotEqual(t, first.Reference, second.Reference)
	require.NotContains(t, second.IdempotencyKey, subject, "never derived from the subject (R7)")
	r, err = h.svc.Execute(h.ctx, second.ID)
	require.NoError(t, err)
	require.Equal(t, StatusSucceeded, r.Attempt.Status)

	_, err = h.openErr(subject)
	require.ErrorIs(t, err, ErrSubjectSucceeded)
	list, err := h.svc.ForSubject(h.ctx, h.pool, subject)
	require.NoError(t, err)
	require.Len(t, list, 2)
	require.Equal(t, 1, h.psp.seen(first.IdempotencyKey))
	require.Equal(t, 1, h.psp.seen(second.IdempotencyKey))
	h.requireNoViolations()
}

// TestDatabaseGuards: the trigger enforces R9 and immutability even against
// hand-written SQL; events are append-only.
func TestDatabaseGuards(t *testing.T) {
	t.Parallel()
	h := setup(t, harnessOpts{})
	a := h.open(newSubject())
	exec := func(sql string, args ...any) error {
		return pgx.BeginFunc(h.ctx, h.pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(h.ctx, sql, args...)
			return err
		})
	}
	require.Error(t, exec(`UPDATE attempts SET idempotency_key = 'another-key-0000000' WHERE id = $1`, a.ID))
	require.Error(t, exec(`UPDATE attempts SET payload = '{}'::bytea, payload_sha256 = sha256('{}'::bytea) WHERE id = $1`, a.ID))
	require.Error(t, exec(`UPDATE attempts SET payload = '{}'::bytea WHERE id = $1`, a.ID))
	require.ErrorContains(t, exec(`DELETE FROM attempts WHERE id = $1`, a.ID), "never deleted")
	// The guard's WHEN clause (migration 00021) lets it run only for a
	// violation: each rule it carries still refuses.
	require.ErrorContains(t, exec(`UPDATE attempts SET reference = 'ffffffffffffffffffffffffffffffff' WHERE id = $1`, a.ID), "identity is immutable")
	require.ErrorContains(t, exec(`UPDATE attempts SET created_at = created_at - interval '1 day' WHERE id = $1`, a.ID), "identity is immutable")
	require.NoError(t, exec(`UPDATE attempts SET call_count = 2, calls_recorded = 1, provider_id = 'p-1' WHERE id = $1`, a.ID),
		"counters forward and a first provider id are allowed")
	require.ErrorContains(t, exec(`UPDATE attempts SET call_count = 1 WHERE id = $1`, a.ID), "never go back")
	require.ErrorContains(t, exec(`UPDATE attempts SET calls_recorded = 0 WHERE id = $1`, a.ID), "never go back")
	require.ErrorContains(t, exec(`UPDATE attempts SET provider_id = 'p-2' WHERE id = $1`, a.ID), "provider_id is immutable")
	require.ErrorContains(t, exec(`UPDATE attempts SET provider_id = NULL WHERE id = $1`, a.ID), "provider_id is immutable")
	require.Error(t, exec(`UPDATE attempt_events SET reason = 'x' WHERE attempt_id = $1`, a.ID))
	require.Error(t, exec(`DELETE FROM attempt_events WHERE attempt_id = $1`, a.ID))
	require.Error(t, exec(`TRUNCATE attempt_events CASCADE`))

	// Every (from, to) pair through the trigger matches CanTransition.
	for _, from := range Statuses {
		for _, to := range Statuses {
			if from == to {
				continue
			}
			err := pgx.BeginFunc(h.ctx, h.pool, func(tx pgx.Tx) error {
				b, err := h.svc.Open(h.ctx, tx, OpenParams{Kind: KindPixTransfer, SubjectID: newSubject(), Provider: "fake",
					Input: providers.OperationInput{Operation: providers.OpPixTransfer, Amount: "1.00", Currency: "BRL"}})
				if err != nil {
					return err
				}
				set := func(s Status) error {
					_, err := tx.Exec(h.ctx, `UPDATE attempts SET status = $2,
						resolved_at = CASE WHEN $2 IN ('succeeded','failed') THEN now() END WHERE id = $1`, b.ID, s)
					return err
				}
				if from != StatusPending {
					if err := set(from); err != nil {
						return err
					}
				}
				if err := set(to); err != nil {
					return errTrigger
				}
				return errRollback
			})
			if CanTransition(from, to) {
				require.ErrorIs(t, err, errRollback, "%s -> %s", from, to)
			} else {
				require.ErrorIs(t, err, errTrigger, "%s -> %s must be refused by the trigger", from, to)
			}
		}
	}
}

var (
	errTrigger  = errors.New("refused")
	errRollback = errors.New("rollback")
)

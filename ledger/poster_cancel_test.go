package ledger

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/money"
)

// TestPosterCancelledRequestReleasesItsAccounts (R23: the Poster holds a
// batch's accounts while it is in flight, so an account's transfers are
// written in order): flush compacted the batch in place (live :=
// batch[:0]), so when a request that gave up was not the last of its
// batch, the flusher's release(batch) walked the overwritten array: the
// live request's accounts were released twice and the cancelled one's
// never. Its accounts stayed "held" with no batch in flight, so take never
// handed out a later request naming them: that Post waited until its
// context ended, and Close never returned.
func TestPosterCancelledRequestReleasesItsAccounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	funding, err := EnsureAccount(ctx, pool, PlatformFunding(money.BRL))
	require.NoError(t, err)
	var accs []Account
	for _, n := range []string{"x", "y", "z"} {
		a, err := EnsureAccount(ctx, pool, MerchantAvailable(n, money.BRL))
		require.NoError(t, err)
		accs = append(accs, a)
	}
	x, y, z := accs[0], accs[1], accs[2]
	_, err = Post(ctx, pool, posterTransfer("fund", funding.Code, x.Code, "10"))
	require.NoError(t, err)

	// A Poster without flusher goroutines: the test plays the flusher's
	// loop (take, flush, release) itself.
	p := &Poster{pool: pool, maxBatch: 64, held: make(map[accountRef]int)}
	gone, cancel := context.WithCancel(ctx)
	rA := newPosterRequest(gone, posterTransfer("a", x.Code, y.Code, "1")) // its caller gives up
	rB := newPosterRequest(ctx, posterTransfer("b", funding.Code, z.Code, "1"))
	p.pending = []*posterRequest{rA, rB}
	batch := p.take()
	require.Len(t, batch, 2)
	cancel()
	p.flush(batch)
	p.release(batch)
	require.ErrorIs(t, (<-rA.done).err, context.Canceled)
	require.NoError(t, (<-rB.done).err)

	// Nothing is in flight now: every account must be free again.
	require.Empty(t, p.held, "held after every batch was released: %v", p.held)

	// And a later transfer from x must be takeable.
	p.pending = []*posterRequest{newPosterRequest(ctx, posterTransfer("c", x.Code, y.Code, "1"))}
	require.NotNil(t, p.take(), "a transfer naming x is never taken: its Post hangs")
}

// TestPosterCancelledRequestDoesNotBlockLaterPosts (R23) is the same through the
// public API: a request that gives up while queued behind a busy batch
// must not make a later Post on its accounts wait until its own context
// ends.
func TestPosterCancelledRequestDoesNotBlockLaterPosts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	funding, err := EnsureAccount(ctx, pool, PlatformFunding(money.BRL))
	require.NoError(t, err)
	var accs []Account
	for _, n := range []string{"x", "y", "z", "w"} {
		a, err := EnsureAccount(ctx, pool, MerchantAvailable(n, money.BRL))
		require.NoError(t, err)
		accs = append(accs, a)
	}
	x, y, z, w := accs[0], accs[1], accs[2], accs[3]
	_, err = Post(ctx, pool, posterTransfer("fund", funding.Code, x.Code, "10"))
	require.NoError(t, err)
	_, err = Post(ctx, pool, posterTransfer("fundw", funding.Code, w.Code, "10"))
	require.NoError(t, err)

	p := NewPoster(pool, PosterOptions{Flushers: 1})
	defer func() {
		done := make(chan struct{})
		go func() { p.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Errorf("Poster.Close did not return")
		}
	}()

	// Hold w's row lock so the first batch (w -> funding) waits.
	lock, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = lock.Exec(ctx, `SELECT ledger_lock_accounts(ARRAY[$1::bigint], NULL)`, w.ID)
	require.NoError(t, err)
	first := make(chan error, 1)
	go func() {
		_, err := p.Post(ctx, posterTransfer("first", w.Code, z.Code, "1"))
		first <- err
	}()
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.pending) == 0 && len(p.held) > 0
	}, 30*time.Second, 5*time.Millisecond, "first batch in flight")

	// Queued behind it (z is held): A gives up, B waits.
	gone, cancel := context.WithCancel(ctx)
	aErr := make(chan error, 1)
	go func() {
		_, err := p.Post(gone, posterTransfer("a", x.Code, y.Code, "1"))
		aErr <- err
	}()
	require.Eventually(t, func() bool { p.mu.Lock(); defer p.mu.Unlock(); return len(p.pending) == 1 }, 30*time.Second, time.Millisecond)
	bErr := make(chan error, 1)
	go func() {
		_, err := p.Post(ctx, posterTransfer("b", funding.Code, z.Code, "1"))
		bErr <- err
	}()
	require.Eventually(t, func() bool { p.mu.Lock(); defer p.mu.Unlock(); return len(p.pending) == 2 }, 30*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-aErr, context.Canceled)
	require.NoError(t, lock.Rollback(ctx))
	require.NoError(t, <-first)
	require.NoError(t, <-bErr)

	// A later transfer from x: nothing else is queued or in flight. The
	// deadline only turns the hang this guards against into a failure; 3 s
	// was within reach of a loaded machine's slow commit.
	later, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	_, err = p.Post(later, posterTransfer("c", x.Code, y.Code, "1"))
	require.NoError(t, err, "a transfer from x after a cancelled one never gets written")
}

package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"
)

// Poster posts transactions that do not belong to a caller's database
// transaction, with group commit: the Posts that arrive while a batch is
// being written queue up and are written together as the next batch, in
// one round trip and one COMMIT. Each Post still returns only once its
// transaction is committed (or refused), with the same answer and errors as
// Post on a pool, so a caller cannot tell the difference except in
// throughput: a commit, its WAL flush and the round trips are shared by the
// batch, and a hot account's row lock is taken once per batch instead of
// once per transfer.
//
// A batch is one database transaction. Its fast path is one
// ledger_post_batch call (set-based: it locks every account of the batch in
// id order, so batches never deadlock each other or a single Post). If any
// transaction of the batch would be refused or replayed, that call writes
// nothing, and the batch runs ledger_post once per transaction, in arrival
// order, in one pipeline that first locks the batch's accounts in id order.
// A refusal (insufficient funds, idempotency conflict, unknown account, ...)
// is an answer, not an error, and does not affect the other transactions of
// the batch; a later transaction in the same batch sees the balances the
// earlier ones left. If the batch fails as a whole (a database error, a
// failed COMMIT), each of its transactions is posted again on its own, so
// one bad transaction cannot fail the others.
//
// Use Post with a pgx.Tx, not a Poster, when the ledger write must commit
// or roll back together with the caller's other writes.
type Poster struct {
	pool     *pgxpool.Pool
	maxBatch int
	// mu guards pending, held and closed. Flushers wait on cond for a
	// request they may take; Post and a finished batch wake them.
	mu   sync.Mutex
	cond *sync.Cond
	// pending holds the requests not yet in a batch, in arrival order.
	pending []*posterRequest
	// held counts, per account, the batches in flight that write it. A
	// flusher leaves a request whose account another batch in flight
	// writes for a later batch (see take), so batches in flight together
	// never wait for each other's row locks.
	held   map[accountRef]int
	closed bool
	wg     sync.WaitGroup

	batches   atomic.Int64
	setBased  atomic.Int64
	written   atomic.Int64
	fallbacks atomic.Int64
}

// accountRef names an account as a leg does: by id, or by code when the
// id is not given. The same account named both ways counts as two; batches
// holding it then still exclude each other by its row lock, only later.
type accountRef struct {
	id   int64
	code string
}

// PosterStats counts what a Poster has committed.
type PosterStats struct {
	// Commits made: one per batch, or one per transaction when a failed
	// batch was posted transaction by transaction.
	Batches      int64
	SetBased     int64 // batches written by the ledger_post_batch fast path
	Transactions int64 // transactions answered (posted, replayed or refused)
	// Fallbacks counts batches that failed as a whole (a database error, a
	// failed or unanswered COMMIT) and were posted transaction by
	// transaction (saldo_ledger_poster_fallbacks_total). Expected zero.
	Fallbacks int64
}

// Stats returns the counts so far.
func (p *Poster) Stats() PosterStats {
	return PosterStats{Batches: p.batches.Load(), SetBased: p.setBased.Load(), Transactions: p.written.Load(),
		Fallbacks: p.fallbacks.Load()}
}

// PosterOptions configure a Poster. Zero values take the defaults.
type PosterOptions struct {
	// MaxBatch caps the transactions in one batch (default 64).
	MaxBatch int
	// Flushers is how many batches may be in flight at once, each on its
	// own connection (default 2). Batches in flight together write
	// disjoint accounts: a request naming an account that a batch in
	// flight writes waits for the next batch (Poster.take), so a second
	// flusher uses another core instead of queueing on the first's row
	// locks, and a hot account's transfers are still written one batch at
	// a time. The pool needs at least that many connections.
	Flushers int
}

// ErrPosterClosed is returned by Poster.Post after Close.
var ErrPosterClosed = errors.New("ledger: poster closed")

type posterRequest struct {
	ctx      context.Context
	in       TransactionInput
	accounts []accountRef // the accounts in's legs name, each once
	start    time.Time
	done     chan posterResult
}

func newPosterRequest(ctx context.Context, in TransactionInput) *posterRequest {
	r := &posterRequest{ctx: ctx, in: in, start: time.Now(), done: make(chan posterResult, 1),
		accounts: make([]accountRef, 0, len(in.Postings))}
	for _, leg := range in.Postings {
		a := accountRef{id: leg.AccountID}
		if a.id == 0 {
			a.code = leg.AccountCode
		}
		if !slices.Contains(r.accounts, a) {
			r.accounts = append(r.accounts, a)
		}
	}
	return r
}

type posterResult struct {
	tx  Transaction
	err error
}

// NewPoster starts a Poster writing through pool. Close it when done.
func NewPoster(pool *pgxpool.Pool, o PosterOptions) *Poster {
	if o.MaxBatch <= 0 {
		o.MaxBatch = 64
	}
	if o.Flushers <= 0 {
		o.Flushers = 2
	}
	p := &Poster{pool: pool, maxBatch: o.MaxBatch, held: make(map[accountRef]int)}
	p.cond = sync.NewCond(&p.mu)
	for range o.Flushers {
		p.wg.Add(1)
		go p.flusher()
	}
	return p
}

// Post posts in with group commit and returns the committed transaction
// (or the original one, Replayed, for a key already posted). Errors are
// those of Post.
//
// If ctx ends before the batch holding the transaction commits, Post
// returns ctx's error and the transaction may or may not be posted: post
// the same input again (same idempotency key) to learn which.
//
// A batch whose COMMIT answer was lost (a cut connection) may have
// committed; its transactions are then posted one by one, and a key that
// batch wrote comes back as a replay of what it wrote: Replayed is set
// although no earlier request posted the key. The transaction is the one
// committed, once; only "someone posted this before" cannot be told from
// "this request's own batch posted it" without a mark in the ledger.
func (p *Poster) Post(ctx context.Context, in TransactionInput) (Transaction, error) {
	if err := in.Validate(); err != nil {
		return Transaction{}, err
	}
	if err := ctx.Err(); err != nil {
		return Transaction{}, err
	}
	r := newPosterRequest(ctx, in)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return Transaction{}, ErrPosterClosed
	}
	p.pending = append(p.pending, r)
	p.cond.Signal()
	p.mu.Unlock()
	// A request that gave up stays queued: its batch answers it with its
	// context's error and writes nothing for it (flush).
	select {
	case res := <-r.done:
		return res.tx, res.err
	case <-ctx.Done():
		return Transaction{}, ctx.Err()
	}
}

// Close stops taking Posts, finishes the ones already queued and returns
// when every batch is written.
func (p *Poster) Close() {
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Poster) flusher() {
	defer p.wg.Done()
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if batch := p.take(); len(batch) > 0 {
			p.mu.Unlock()
			p.flush(batch)
			p.mu.Lock()
			p.release(batch)
			// Requests left for later may be takeable now.
			p.cond.Broadcast()
			continue
		}
		// Closed and drained: every request was answered (a request left
		// for later always has a batch in flight whose release wakes a
		// flusher).
		if p.closed && len(p.pending) == 0 {
			return
		}
		p.cond.Wait()
	}
}

// take makes a batch, under mu, of up to MaxBatch pending requests in
// arrival order, leaving for a later batch every request that names an
// account a batch in flight writes, and every later request sharing an
// account with one left (so the transfers of one account are written in
// arrival order). It marks the batch's accounts held.
func (p *Poster) take() []*posterRequest {
	if len(p.pending) == 0 {
		return nil
	}
	var batch, left []*posterRequest
	var skipped map[accountRef]bool
	i := 0
	for ; i < len(p.pending) && len(batch) < p.maxBatch; i++ {
		r := p.pending[i]
		free := true
		for _, a := range r.accounts {
			if p.held[a] > 0 || skipped[a] {
				free = false
				break
			}
		}
		if !free {
			if skipped == nil {
				skipped = make(map[accountRef]bool)
			}
			for _, a := range r.accounts {
				skipped[a] = true
			}
			left = append(left, r)
			continue
		}
		batch = append(batch, r)
	}
	if len(batch) == 0 {
		return nil
	}
	// The batch's own accounts are held only after the scan: requests in
	// one batch may share accounts (ledger_post_batch applies them in
	// order).
	for _, r := range batch {
		for _, a := range r.accounts {
			p.held[a]++
		}
	}
	p.pending = append(left, p.pending[i:]...)
	return batch
}

// release unmarks a written batch's accounts, under mu.
func (p *Poster) release(batch []*posterRequest) {
	for _, r := range batch {
		for _, a := range r.accounts {
			if p.held[a]--; p.held[a] == 0 {
				delete(p.held, a)
			}
		}
	}
}

// flush writes one batch and answers every request in it.
func (p *Poster) flush(batch []*posterRequest) {
	// A new slice: compacting batch in place would overwrite the array the
	// flusher still releases (a cancelled request's accounts stay held).
	live := make([]*posterRequest, 0, len(batch))
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.done <- posterResult{err: err}
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	// The batch's own context: one caller giving up must not cut the
	// others' transaction short.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	answers, err := p.writeBatch(ctx, live)
	if err != nil {
		// The batch did not commit (or, with a lost connection, may have):
		// each transaction on its own. Its idempotency key turns one that
		// did commit into a replay of the original.
		p.batches.Add(int64(len(live)))
		p.written.Add(int64(len(live)))
		p.fallbacks.Add(1)
		posterFallbacks.Inc()
		for _, r := range live {
			tx, err := post(r.ctx, p.pool, r.in, 0)
			r.done <- posterResult{tx: tx, err: err}
		}
		return
	}
	p.batches.Add(1)
	p.written.Add(int64(len(live)))
	posterBatchSize.Observe(float64(len(live)))
	for i, r := range live {
		tx, err := answers[i].result(r.ctx, p.pool, r.in.IdempotencyKey)
		observePost(r.start, tx, err)
		r.done <- posterResult{tx: tx, err: err}
	}
}

// lockAccountsSQL locks every account a batch names, in id order, before
// any ledger_post of the batch runs. ledger_lock_accounts runs as the
// ledger's owner (migration 00100): the role saldo serves as has no UPDATE
// right on the accounts, which SELECT FOR UPDATE needs.
const lockAccountsSQL = `SELECT ledger_lock_accounts($1::bigint[], $2::text[])`

// postBatchSQL calls ledger_post_batch (migration 00012).
const postBatchSQL = `
	SELECT outcome, transaction_ids, posted_at, account_ids, account_codes, seqs,
	       balances_after::text[], hashes
	FROM ledger_post_batch($1, $2, $3, $4, $5::jsonb[], $6::timestamptz[], $7, $8, $9, $10, $11::numeric[], $12)`

// writeBatch writes a batch in one database transaction and returns the
// answers only once it committed. The fast path is one ledger_post_batch
// call; when it falls back (some transaction of the batch would be refused
// or replayed) it writes nothing, and the batch goes through ledger_post
// transaction by transaction, in one pipeline.
func (p *Poster) writeBatch(ctx context.Context, live []*posterRequest) ([]postAnswer, error) {
	answers, ok, err := p.writeSetBased(ctx, live)
	if err != nil || ok {
		if ok {
			p.setBased.Add(1)
		}
		return answers, err
	}
	return p.writePipelined(ctx, live)
}

// writeSetBased is the ledger_post_batch fast path; ok is false when it
// fell back and wrote nothing.
func (p *Poster) writeSetBased(ctx context.Context, live []*posterRequest) ([]postAnswer, bool, error) {
	ins := make([]TransactionInput, len(live))
	for k, r := range live {
		ins[k] = r.in
	}
	return postSetBased(ctx, p.pool, ins)
}

// postSetBased calls ledger_post_batch on db for ins; ok is false when the
// function fell back and wrote nothing (something in ins would be refused
// or replayed).
func postSetBased(ctx context.Context, db DBTX, ins []TransactionInput) ([]postAnswer, bool, error) {
	m := len(ins)
	keys, kinds, causeIDs, descs := make([]string, m), make([]string, m), make([]string, m), make([]string, m)
	metadata, effective := make([]any, m), make([]any, m)
	var txIdx, legs []int32
	var ids []int64
	var codes, amounts, currencies []string
	for k, in := range ins {
		keys[k], kinds[k], causeIDs[k], descs[k] = in.IdempotencyKey, in.CauseKind, in.CauseID, in.Description
		metadata[k], effective[k] = in.optionalArgs()
		for i, leg := range in.Postings {
			txIdx = append(txIdx, int32(k+1))
			legs = append(legs, int32(i+1))
			ids = append(ids, leg.AccountID)
			codes = append(codes, leg.AccountCode)
			amounts = append(amounts, leg.Amount.String())
			currencies = append(currencies, leg.Currency.Code())
		}
	}
	var (
		outcome                 string
		txIDs, accountIDs, seqs []int64
		postedAt                *time.Time
		accountCodes, balances  []string
		hashes                  [][]byte
	)
	err := db.QueryRow(ctx, postBatchSQL, keys, kinds, causeIDs, descs, metadata, effective,
		txIdx, legs, ids, codes, amounts, currencies).
		Scan(&outcome, &txIDs, &postedAt, &accountIDs, &accountCodes, &seqs, &balances, &hashes)
	if err != nil {
		return nil, false, fmt.Errorf("ledger: batch of %d: %w", m, mapPgError(err))
	}
	if outcome != "posted" {
		return nil, false, nil
	}
	n := len(txIdx)
	if len(txIDs) != m || postedAt == nil || len(accountIDs) != n || len(accountCodes) != n ||
		len(seqs) != n || len(balances) != n || len(hashes) != n {
		return nil, false, fmt.Errorf("ledger: batch of %d: answer of the wrong shape", m)
	}
	answers := make([]postAnswer, m)
	g := 0
	for k, in := range ins {
		tx := Transaction{
			ID: txIDs[k], IdempotencyKey: in.IdempotencyKey, CauseKind: in.CauseKind, CauseID: in.CauseID,
			Description: in.Description, Metadata: in.Metadata, EffectiveAt: in.EffectiveAt, PostedAt: *postedAt,
			Postings: make([]Posting, len(in.Postings)),
		}
		if tx.EffectiveAt.IsZero() {
			tx.EffectiveAt = *postedAt
		}
		for i, leg := range in.Postings {
			bal, err := decimal.NewFromString(balances[g])
			if err != nil {
				return nil, false, fmt.Errorf("ledger: batch: balance %q: %w", balances[g], err)
			}
			tx.Postings[i] = Posting{
				TransactionID: tx.ID, Leg: i + 1, AccountID: accountIDs[g], AccountCode: accountCodes[g], Seq: seqs[g],
				Amount: leg.Amount, Currency: leg.Currency, BalanceAfter: bal, PostedAt: *postedAt, Hash: hashes[g],
			}
			g++
		}
		answers[k] = postAnswer{outcome: "posted", tx: tx}
	}
	return answers, true, nil
}

// writePipelined sends a lock of every account the batch names and every
// ledger_post in one pipeline, which PostgreSQL runs as one implicit
// transaction committed at its end.
func (p *Poster) writePipelined(ctx context.Context, live []*posterRequest) ([]postAnswer, error) {
	var ids []int64
	var codes []string
	for _, r := range live {
		for _, leg := range r.in.Postings {
			if leg.AccountID != 0 {
				ids = append(ids, leg.AccountID)
			} else {
				codes = append(codes, leg.AccountCode)
			}
		}
	}
	b := &pgx.Batch{}
	b.Queue(lockAccountsSQL, ids, codes)
	for _, r := range live {
		b.Queue(postSQL, postArgs(r.in, 0)...)
	}
	br := p.pool.SendBatch(ctx, b)
	answers := make([]postAnswer, len(live))
	_, err := br.Exec()
	for i := 0; err == nil && i < len(live); i++ {
		var rows pgx.Rows
		rows, err = br.Query()
		if err == nil {
			answers[i], err = readPostRows(rows, live[i].in, 0)
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: poster batch of %d: %w", len(live), mapPgError(err))
	}
	return answers, nil
}

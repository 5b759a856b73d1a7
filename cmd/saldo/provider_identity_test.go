package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
	"github.com/saldo/saldo/providers/stripe"
	"github.com/saldo/saldo/providers/stripe/stripefake"
)

// checkAs runs the start-up identity check for provs, as serve does.
func checkAs(t *testing.T, pool *pgxpool.Pool, wait time.Duration, provs []providers.Provider, accept ...string) error {
	t.Helper()
	return checkProviderIdentities(context.Background(), identityCheck{Pool: pool, Providers: provs, Accept: accept,
		Wait: wait, Actor: "test " + t.Name(), Log: slog.New(slog.DiscardHandler)})
}

func stripeAt(t *testing.T, base, key string) *stripe.Provider {
	t.Helper()
	p, err := stripe.New(stripe.Config{APIKey: providers.Secret(key), BaseURL: base,
		HTTP: providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: 10 * time.Second}})
	require.NoError(t, err)
	return p
}

func startSim(t *testing.T) *sim.Server {
	t.Helper()
	srv := sim.NewServer(sim.Config{Seed: 1}).Start()
	t.Cleanup(srv.Close)
	return srv
}

type identityRow struct {
	Account, Fingerprint string
	Events               []string
}

func identityOf(t *testing.T, pool *pgxpool.Pool, name string) identityRow {
	t.Helper()
	ctx := context.Background()
	var r identityRow
	require.NoError(t, pool.QueryRow(ctx, `SELECT account, fingerprint FROM provider_identities WHERE name = $1`, name).
		Scan(&r.Account, &r.Fingerprint))
	rows, err := pool.Query(ctx, `SELECT kind FROM provider_identity_events WHERE name = $1 ORDER BY id`, name)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var k string
		require.NoError(t, rows.Scan(&k))
		r.Events = append(r.Events, k)
	}
	require.NoError(t, rows.Err())
	return r
}

// R4, R8, R16: "stripe" recorded for one account, a start configured with
// another account's key under the same name is refused, naming the
// provider, both accounts and the way on, never the keys.
func TestSameNameAnotherStripeAccountIsRefused_R4_R8_R16(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	const keyA, keyB = "sk_live_AccountAKeySecret0001", "sk_test_AccountBKeySecret0002"
	a := stripefake.New(keyA, stripefake.WithAccount("acct_1AAAA"))
	t.Cleanup(a.Close)
	b := stripefake.New(keyB, stripefake.WithAccount("acct_1BBBB"))
	t.Cleanup(b.Close)

	require.NoError(t, checkAs(t, pool, time.Second, []providers.Provider{stripeAt(t, a.URL(), keyA)}))
	rec := identityOf(t, pool, "stripe")
	require.Contains(t, rec.Account, "acct_1AAAA (live mode)")
	require.Equal(t, []string{"recorded"}, rec.Events)

	err := checkAs(t, pool, time.Second, []providers.Provider{stripeAt(t, b.URL(), keyB)})
	require.Error(t, err)
	msg := err.Error()
	for _, want := range []string{"refusing to start", "provider stripe", "acct_1AAAA", "acct_1BBBB", "--accept-provider-identity stripe"} {
		require.Contains(t, msg, want)
	}
	require.NotContains(t, msg, keyA)
	require.NotContains(t, msg, keyB)
	require.Equal(t, rec, identityOf(t, pool, "stripe"), "a refused start changes nothing")

	// The same account in test mode is another world too (its objects are
	// not the live ones).
	a.Close()
	c := stripefake.New("sk_test_AccountAInTestMode", stripefake.WithAccount("acct_1AAAA"))
	t.Cleanup(c.Close)
	err = checkAs(t, pool, time.Second, []providers.Provider{stripeAt(t, c.URL(), "sk_test_AccountAInTestMode")})
	require.ErrorContains(t, err, "acct_1AAAA (test mode)")
}

// R16: a rotated key of the same account (Stripe confirms the account) is
// accepted, and the fingerprint follows the new configuration, with an
// event saying so.
func TestRotatedStripeKeySameAccountIsAccepted_R16(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	const oldKey, newKey = "sk_live_OldKeyOfTheAccount01", "sk_live_NewKeyOfTheAccount02"
	f := stripefake.New(oldKey, stripefake.WithAccount("acct_1ROT"), stripefake.WithKeys(newKey))
	t.Cleanup(f.Close)

	require.NoError(t, checkAs(t, pool, time.Second, []providers.Provider{stripeAt(t, f.URL(), oldKey)}))
	before := identityOf(t, pool, "stripe")
	require.NoError(t, checkAs(t, pool, time.Second, []providers.Provider{stripeAt(t, f.URL(), newKey)}))
	after := identityOf(t, pool, "stripe")
	require.Equal(t, before.Account, after.Account)
	require.NotEqual(t, before.Fingerprint, after.Fingerprint, "the fingerprint follows the confirmed configuration")
	require.Equal(t, []string{"recorded", "fingerprint_changed"}, after.Events)

	// The same account behind another base URL (a proxy in front of
	// Stripe) is the same account too.
	proxy := stripefake.New(newKey, stripefake.WithAccount("acct_1ROT"))
	t.Cleanup(proxy.Close)
	require.NoError(t, checkAs(t, pool, time.Second, []providers.Provider{stripeAt(t, proxy.URL(), newKey)}))
	require.Equal(t, []string{"recorded", "fingerprint_changed", "fingerprint_changed"}, identityOf(t, pool, "stripe").Events)

	// Neither key, nor a plain hash of one, is stored.
	var stored string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT row_to_json(i)::text FROM provider_identities i`).Scan(&stored))
	for _, k := range []string{oldKey, newKey} {
		require.NotContains(t, stored, k)
		require.NotContains(t, stored, fmt.Sprintf("%x", sha256Sum(k)))
	}
}

// Issue 20, R16: Stripe unreachable (here: it takes the connection and
// never answers) at a later start. With the configuration last confirmed
// (same URL, same key) saldo starts, within the bounded wait; with another
// key it cannot tell the account and refuses. A first start with an
// unreachable Stripe has nothing to compare with and refuses too.
func TestUnreachableStripeDecidesOnTheFingerprint_R16(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	const key, otherKey = "sk_live_ConfirmedKey00000001", "sk_live_SomeOtherKey00000002"
	f := stripefake.New(key, stripefake.WithAccount("acct_1UNR"), stripefake.WithKeys(otherKey))
	base := f.URL()
	require.NoError(t, checkAs(t, pool, time.Second, []providers.Provider{stripeAt(t, base, key)}))
	f.Close()
	// The same address, now a PSP that never answers.
	ln, err := net.Listen("tcp", strings.TrimPrefix(base, "http://"))
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })

	start := time.Now()
	require.NoError(t, checkAs(t, pool, 300*time.Millisecond, []providers.Provider{stripeAt(t, base, key)}),
		"same fingerprint as the last confirmed start: saldo starts during the outage")
	require.Less(t, time.Since(start), 5*time.Second, "the wait is bounded")

	err = checkAs(t, pool, 300*time.Millisecond, []providers.Provider{stripeAt(t, base, otherKey)})
	require.Error(t, err)
	require.Contains(t, err.Error(), "provider stripe: the PSP did not say which account")
	require.Contains(t, err.Error(), "acct_1UNR")
	require.NotContains(t, err.Error(), otherKey)
	require.Equal(t, []string{"recorded"}, identityOf(t, pool, "stripe").Events)

	// A first start with an unreachable PSP: nothing to compare with.
	fresh := testdb.New(t)
	err = checkAs(t, fresh, 300*time.Millisecond, []providers.Provider{stripeAt(t, base, key)})
	require.ErrorContains(t, err, "no account is recorded for this name yet")
}

// R8, R16, R22: --accept-provider-identity re-points a name only when none
// of its attempts is open (pending, unknown, in review, a divergence not
// settled): those can only be resolved at the recorded account. With none
// open it is accepted and recorded as a "repointed" event.
func TestAcceptProviderIdentityOnlyWithoutOpenAttempts_R8_R16_R22(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	simA, simB := startSim(t), startSim(t)
	require.NoError(t, checkAs(t, pool, time.Second, []providers.Provider{simA.NewProvider()}))

	// One open attempt under "sim", one under another name (not counted).
	pending := insertAttempt(t, pool, "sim")
	insertAttempt(t, pool, "other")
	err := checkAs(t, pool, time.Second, []providers.Provider{simB.NewProvider()}, "sim")
	require.ErrorContains(t, err, "provider sim: --accept-provider-identity refused: 1 attempt(s)")

	// Failed, but with a divergence nobody settled: still open.
	_, err = pool.Exec(ctx, `UPDATE attempts SET status = 'failed', resolved_at = now(), resolved_by = 'test',
		diverged_at = now(), divergence = 'the PSP paid it after all' WHERE id = $1`, pending)
	require.NoError(t, err)
	err = checkAs(t, pool, time.Second, []providers.Provider{simB.NewProvider()}, "sim")
	require.ErrorContains(t, err, "1 attempt(s)")
	require.Contains(t, identityOf(t, pool, "sim").Account, simA.URL())

	_, err = pool.Exec(ctx, `UPDATE attempts SET divergence_settled_at = now(), divergence_settled_by = 'ops',
		divergence_settlement = 'returned by the payee' WHERE id = $1`, pending)
	require.NoError(t, err)
	require.NoError(t, checkAs(t, pool, time.Second, []providers.Provider{simB.NewProvider()}, "sim"))
	rec := identityOf(t, pool, "sim")
	require.Equal(t, "sim at "+simB.URL(), rec.Account)
	require.Equal(t, []string{"recorded", "repointed"}, rec.Events)
	var before, after, actor string
	require.NoError(t, pool.QueryRow(ctx, `SELECT account_before, account_after, actor FROM provider_identity_events
		WHERE kind = 'repointed'`).Scan(&before, &after, &actor))
	require.Equal(t, "sim at "+simA.URL(), before)
	require.Equal(t, "sim at "+simB.URL(), after)
	require.Contains(t, actor, t.Name())

	// The old sim is now the stranger; and an accept flag naming a
	// provider that is not configured is refused.
	require.Error(t, checkAs(t, pool, time.Second, []providers.Provider{simA.NewProvider()}))
	require.ErrorContains(t, checkAs(t, pool, time.Second, []providers.Provider{simB.NewProvider()}, "pix"),
		`--accept-provider-identity names "pix", which is not a configured provider`)
}

// R16: processes starting at the same moment with one name for two sims
// agree on one identity: exactly one starts, the other is refused.
func TestConcurrentFirstStartsRecordOneIdentity_R16(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	simA, simB := startSim(t), startSim(t)
	for i := range 10 {
		name := fmt.Sprintf("sim-%d", i)
		errs := make([]error, 4)
		var wg sync.WaitGroup
		for j := range errs {
			srv := simA
			if j%2 == 1 {
				srv = simB
			}
			wg.Go(func() {
				errs[j] = checkAs(t, pool, time.Second, []providers.Provider{srv.NewProvider(sim.WithName(name))})
			})
		}
		wg.Wait()
		rec := identityOf(t, pool, name)
		winner := simA.URL()
		if strings.HasSuffix(rec.Account, simB.URL()) {
			winner = simB.URL()
		}
		for j, err := range errs {
			if (j%2 == 0) == (winner == simA.URL()) {
				require.NoError(t, err, "start %d configured like the recorded identity", j)
			} else {
				require.ErrorContains(t, err, "provider "+name+" is recorded as", "start %d configured for the other sim", j)
			}
		}
		require.Equal(t, []string{"recorded"}, rec.Events, "one identity recorded")
	}
}

// insertAttempt adds an open (pending) card_charge attempt for provider:
// only its status counts here.
func insertAttempt(t *testing.T, pool *pgxpool.Pool, provider string) string {
	t.Helper()
	var id string
	require.NoError(t, pool.QueryRow(context.Background(), `INSERT INTO attempts (id, kind, subject_id, provider, operation,
		idempotency_key, reference, payload, payload_sha256, created_at, updated_at)
		VALUES (gen_random_uuid(), 'card_charge', gen_random_uuid()::text, $1, 'card_charge',
			'key-' || gen_random_uuid()::text, md5(random()::text), '\x7b7d', sha256('\x7b7d'), now(), now())
		RETURNING id::text`, provider).Scan(&id))
	return id
}

func sha256Sum(s string) [32]byte { return sha256.Sum256([]byte(s)) }

// R16, R19: saldo reconcile reads a name's statement only at the account
// the name means: a statement of another account would make every
// attempt a divergence, or resolve one from a stranger's line.
func TestReconcileCommandRefusesAnotherAccount_R16_R19(t *testing.T) {
	t.Parallel()
	dbURL := testdb.NewURL(t)
	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	simA, simB := startSim(t), startSim(t)
	require.NoError(t, checkAs(t, pool, time.Second, []providers.Provider{simA.NewProvider()}))
	var out strings.Builder
	err = runReconcile(context.Background(), []string{"--database-url", dbURL, "--sim-url", simB.URL(), "--provider", "sim",
		"--date", time.Now().UTC().AddDate(0, 0, -3).Format(time.DateOnly)}, &out, false)
	require.ErrorContains(t, err, "provider sim is recorded as sim at "+simA.URL())
	require.NotContains(t, out.String(), "statement lines")
}

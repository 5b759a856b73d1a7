package main

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/saldo/saldo/providers"
)

// defaultIdentityWait bounds how long start-up waits for a PSP to say which
// account a key belongs to (Stripe's GET /v1/account). saldo must start,
// and take payouts, while a PSP is down (issue 20): then the
// configuration's fingerprint decides.
const defaultIdentityWait = 5 * time.Second

// identityCheck is what checkProviderIdentities needs.
type identityCheck struct {
	Pool      *pgxpool.Pool
	Providers []providers.Provider
	// Accept names the providers whose recorded identity may be replaced
	// by the configured one (--accept-provider-identity), if they have no
	// open attempt.
	Accept []string
	// Wait bounds each provider's Identity call (default defaultIdentityWait).
	Wait time.Duration
	// Actor says who starts (recorded on every identity event).
	Actor string
	Log   *slog.Logger
	// Locks, when set, are this process's holds on its provider names
	// (holdProviderNames): a re-point then needs every other process
	// configured with the name to be gone.
	Locks *providerNameLocks
}

// providerNameLockClass is the first key of the advisory locks on provider
// names (the second is hashtext(name)).
const providerNameLockClass = 0x5a1d01

// providerNameLocks holds a shared session advisory lock per provider
// name, on a connection of its own, for the life of the process: every
// saldo process configured with a name holds it while it runs. A re-point
// (--accept-provider-identity, or saldo dev on an outside database) takes
// the name's lock exclusively first, so it is refused while any other
// process still runs configured for the recorded account: its attempts
// would be looked up at the new one, read "not found" and paid again
// (R16; found by review: a second saldo dev re-pointed "sim" under a
// running one). Processes of versions before the check hold nothing; the
// runbook still says to stop them first. The locks go with the connection.
type providerNameLocks struct {
	conn *pgx.Conn
}

// holdProviderNames takes the shared locks of names (waiting, within ctx,
// for a re-point in progress to finish).
func holdProviderNames(ctx context.Context, pool *pgxpool.Pool, names []string) (*providerNameLocks, error) {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	l := &providerNameLocks{conn: c.Hijack()}
	for _, n := range names {
		if _, err := l.conn.Exec(ctx, `SELECT pg_advisory_lock_shared($1, hashtext($2))`, providerNameLockClass, n); err != nil {
			l.Close()
			return nil, fmt.Errorf("provider %s: hold its name: %w", n, err)
		}
	}
	return l, nil
}

// tryExclusive takes name's lock exclusively, if no other process holds
// it (this one's own shared hold does not conflict).
func (l *providerNameLocks) tryExclusive(ctx context.Context, name string) (bool, error) {
	var ok bool
	err := l.conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, hashtext($2))`, providerNameLockClass, name).Scan(&ok)
	return ok, err
}

// releaseExclusive gives back what tryExclusive took (the shared hold stays).
func (l *providerNameLocks) releaseExclusive(ctx context.Context, name string) error {
	_, err := l.conn.Exec(ctx, `SELECT pg_advisory_unlock($1, hashtext($2))`, providerNameLockClass, name)
	return err
}

// Close lets go of every hold.
func (l *providerNameLocks) Close() {
	if l != nil && l.conn != nil {
		_ = l.conn.Close(context.Background())
	}
}

// checkProviderIdentities makes sure every configured provider name means
// the account it meant before (R4, R8, R16): it records the identity of a
// name seen for the first time, and refuses to start when a name is
// configured for another account than the one recorded, unless the name is
// in Accept and none of its attempts is open. It runs before any worker,
// sender or resolver starts. One transaction per name, its row locked, so
// that processes starting together agree on one identity.
func checkProviderIdentities(ctx context.Context, ic identityCheck) error {
	if ic.Wait <= 0 {
		ic.Wait = defaultIdentityWait
	}
	var problems []string
	configured := map[string]bool{}
	for _, p := range ic.Providers {
		configured[p.Name()] = true
	}
	for _, n := range ic.Accept {
		if !configured[n] {
			problems = append(problems, fmt.Sprintf("--accept-provider-identity names %q, which is not a configured provider", n))
		}
	}
	for _, p := range ic.Providers {
		idr, ok := p.(providers.Identifier)
		if !ok {
			ic.Log.Warn("provider cannot say which account it is configured for: its name is not checked against the account recorded",
				"provider", p.Name())
			continue
		}
		// The network call (Stripe) is made before the transaction: none
		// is held open across a call to a provider.
		callCtx, cancel := context.WithTimeout(ctx, ic.Wait)
		id, idErr := idr.Identity(callCtx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := checkIdentity(ctx, ic, p.Name(), id, idErr, slices.Contains(ic.Accept, p.Name())); err != nil {
			var refused *identityRefusedError
			if !errors.As(err, &refused) {
				return fmt.Errorf("provider %s: identity check: %w", p.Name(), err)
			}
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return errors.New("refusing to start:\n  " + strings.Join(problems, "\n  "))
	}
	return nil
}

// identityRefusedError is a refusal (as opposed to a database error).
type identityRefusedError struct{ msg string }

func (e *identityRefusedError) Error() string { return e.msg }

func refused(format string, args ...any) error {
	return &identityRefusedError{msg: fmt.Sprintf(format, args...)}
}

// fingerprint is the configuration's fingerprint under key: sha256 of the
// non-secret configuration and of HMAC-SHA256(key, secret). The key is
// random per name and kept beside the fingerprint: the secret is never
// stored, nor a plain hash of it that could be matched elsewhere.
func fingerprint(key []byte, id providers.Identity) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id.Secret))
	h := sha256.New()
	fmt.Fprintf(h, "saldo provider fingerprint v1\x00%d\x00%s\x00", len(id.Config), id.Config)
	h.Write(mac.Sum(nil))
	return hex.EncodeToString(h.Sum(nil))
}

// recordedIdentity is a provider_identities row.
type recordedIdentity struct {
	account, fingerprint string
	key                  []byte
	recordedAt           time.Time
}

// checkIdentity checks one name in one transaction. id is what the
// adapter said; idErr, when set, means it could not say which account
// (id.Config and id.Secret are still set).
func checkIdentity(ctx context.Context, ic identityCheck, name string, id providers.Identity, idErr error, acceptNew bool) error {
	tx, err := ic.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	rec, found, err := lockIdentity(ctx, tx, name)
	if err != nil {
		return err
	}
	if !found {
		if idErr != nil {
			return refused("provider %s: no account is recorded for this name yet and the PSP did not say which account "+
				"the configuration is for (%v): start again once it answers", name, idErr)
		}
		// Attempts under the name from before the name was first recorded
		// (an upgrade from a version without this check) were sent to an
		// account nobody wrote down: recording whatever this process is
		// configured for could point their lookups at another (R16). The
		// operator confirms it is the same account (found by review).
		if !acceptNew {
			open, err := openAttempts(ctx, tx, name)
			if err != nil {
				return err
			}
			if open > 0 {
				return refused("provider %s: no account is recorded for this name yet, and %d of its attempts are open "+
					"(sent before the name's account was recorded): if %s is the account they were sent to, start once "+
					"with --accept-provider-identity %s to record it; otherwise point the configuration at that account",
					name, open, id.Account, name)
			}
		}
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return err
		}
		// ON CONFLICT: a process starting at the same moment may have
		// recorded the name first; its row is then locked and compared.
		tag, err := tx.Exec(ctx, `INSERT INTO provider_identities (name, account, fingerprint, fingerprint_key,
			recorded_at, confirmed_at, fingerprint_at) VALUES ($1, $2, $3, $4, now(), now(), now())
			ON CONFLICT (name) DO NOTHING`, name, id.Account, fingerprint(key, id), key)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 1 {
			if err := identityEvent(ctx, tx, name, "recorded", "", id.Account, ic.Actor); err != nil {
				return err
			}
			if err := tx.Commit(ctx); err != nil {
				return err
			}
			ic.Log.Info("provider identity recorded", "provider", name, "account", id.Account)
			return nil
		}
		if rec, found, err = lockIdentity(ctx, tx, name); err != nil {
			return err
		} else if !found {
			return fmt.Errorf("provider_identities row for %q neither inserted nor found", name)
		}
	}
	fp := fingerprint(rec.key, id)
	switch {
	case idErr != nil && fp == rec.fingerprint:
		// The same key at the same place as at the last confirmed start:
		// the same account (a key belongs to one account).
		ic.Log.Warn("the PSP did not say which account the configuration is for; starting on the configuration's fingerprint, "+
			"unchanged since the account was last confirmed", "provider", name, "account", rec.account, "error", idErr.Error())
		return nil
	case idErr != nil:
		return refused("provider %s: the PSP did not say which account the configuration is for (%v), and the configuration "+
			"(URL or key) differs from the one last confirmed for %s: saldo cannot tell it is the same account. Start with the "+
			"previous configuration until the PSP answers, or wait for it to answer", name, idErr, rec.account)
	case id.Account == rec.account:
		if fp != rec.fingerprint {
			// A rotated key, a moved URL: the PSP confirmed the account.
			if _, err := tx.Exec(ctx, `UPDATE provider_identities SET fingerprint = $2, fingerprint_at = now(), confirmed_at = now()
				WHERE name = $1`, name, fp); err != nil {
				return err
			}
			if err := identityEvent(ctx, tx, name, "fingerprint_changed", "", id.Account, ic.Actor); err != nil {
				return err
			}
			ic.Log.Info("provider configuration changed, same account confirmed: fingerprint updated", "provider", name,
				"account", id.Account)
		} else if _, err := tx.Exec(ctx, `UPDATE provider_identities SET confirmed_at = now() WHERE name = $1`, name); err != nil {
			return err
		}
		return tx.Commit(ctx)
	case !acceptNew:
		return refused("provider %s is recorded as %s (since %s) but is configured as %s: another account, or another PSP, "+
			"under the same name. Its attempts were sent to the recorded account; looked up at another they read \"not found\" "+
			"and would be paid again (R16). Point the configuration back at the recorded account, or give the new account a "+
			"name of its own (--sim-name, --pix-name). To re-point %s on purpose: stop every process configured with it, wait "+
			"until it has no open attempt, and start once with --accept-provider-identity %s (docs/runbook.md)",
			name, rec.account, rec.recordedAt.UTC().Format(time.RFC3339), id.Account, name, name)
	}
	if ic.Locks != nil {
		ok, err := ic.Locks.tryExclusive(ctx, name)
		if err != nil {
			return err
		}
		if !ok {
			return refused("provider %s: --accept-provider-identity refused: another saldo process is running configured "+
				"with %s (recorded as %s); stop every process using the name, then start once with the flag", name, name, rec.account)
		}
		defer func() {
			if err := ic.Locks.releaseExclusive(context.WithoutCancel(ctx), name); err != nil {
				ic.Log.Warn("provider identity: releasing the re-point lock", "provider", name, "error", err.Error())
			}
		}()
	}
	open, err := openAttempts(ctx, tx, name)
	if err != nil {
		return err
	}
	if open > 0 {
		return refused("provider %s: --accept-provider-identity refused: %d attempt(s) at the recorded account (%s) are still "+
			"open (pending, unknown, processing, in review, or a divergence not settled); they can only be resolved there. "+
			"Let them resolve with the previous configuration, then re-point", name, open, rec.account)
	}
	if _, err := tx.Exec(ctx, `UPDATE provider_identities SET account = $2, fingerprint = $3, fingerprint_at = now(),
		confirmed_at = now() WHERE name = $1`, name, id.Account, fp); err != nil {
		return err
	}
	if err := identityEvent(ctx, tx, name, "repointed", rec.account, id.Account, ic.Actor); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	ic.Log.Warn("provider re-pointed at another account (--accept-provider-identity)", "provider", name,
		"from", rec.account, "to", id.Account, "actor", ic.Actor)
	return nil
}

// lockIdentity reads name's row FOR UPDATE.
func lockIdentity(ctx context.Context, tx pgx.Tx, name string) (recordedIdentity, bool, error) {
	var r recordedIdentity
	err := tx.QueryRow(ctx, `SELECT account, fingerprint, fingerprint_key, recorded_at FROM provider_identities
		WHERE name = $1 FOR UPDATE`, name).Scan(&r.account, &r.fingerprint, &r.key, &r.recordedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, false, nil
	}
	return r, err == nil, err
}

// openAttempts counts name's attempts whose fate is still being decided
// at the recorded account: not final (pending, with processing and the
// review queue; unknown), or final with a divergence nobody has settled.
func openAttempts(ctx context.Context, tx pgx.Tx, name string) (int, error) {
	var n int
	err := tx.QueryRow(ctx, `SELECT count(*) FROM attempts WHERE provider = $1
		AND (status IN ('pending', 'unknown') OR (diverged_at IS NOT NULL AND divergence_settled_at IS NULL))`, name).Scan(&n)
	return n, err
}

func identityEvent(ctx context.Context, tx pgx.Tx, name, kind, before, after, actor string) error {
	var b *string
	if before != "" {
		b = &before
	}
	_, err := tx.Exec(ctx, `INSERT INTO provider_identity_events (name, at, kind, account_before, account_after, actor)
		VALUES ($1, now(), $2, $3, $4, $5)`, name, kind, b, after, actor)
	return err
}

// processActor says who starts: the command, the OS user, the host and
// the process id.
func processActor(command string) string {
	if command == "" {
		command = "process"
	}
	who := "unknown user"
	if u, err := user.Current(); err == nil {
		who = u.Username
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("saldo %s as %s on %s (pid %d)", command, who, host, os.Getpid())
}

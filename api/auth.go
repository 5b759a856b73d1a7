package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/saldo/saldo/internal/pgtext"
	"github.com/saldo/saldo/internal/sqlcols"
	"github.com/saldo/saldo/ledger"
	"github.com/saldo/saldo/merchants"
)

// Role is what an API key may do (see the package doc).
type Role string

// Roles.
const (
	RoleMerchant Role = "merchant"
	RoleAuditor  Role = "auditor"
	RoleOperator Role = "operator"
	RoleAdmin    Role = "admin"
)

// Valid reports whether r is a known role.
func (r Role) Valid() bool {
	switch r {
	case RoleMerchant, RoleAuditor, RoleOperator, RoleAdmin:
		return true
	}
	return false
}

// SecretPrefix starts every API key secret.
const SecretPrefix = "sk_"

// ErrInvalidKey: CreateKey was given a bad role / merchant combination.
var ErrInvalidKey = errors.New("api: invalid key request")

// Key is a stored API key (never its secret).
type Key struct {
	ID         string     `json:"id"`
	Prefix     string     `json:"prefix"`
	Role       Role       `json:"role"`
	MerchantID string     `json:"merchant_id,omitempty"`
	Name       string     `json:"name,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
}

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

func hashSecret(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// CreateKey makes a new API key and returns it with its secret, which is
// not stored anywhere (only its sha256): show it once. A merchant key names
// an existing merchant; other roles name none.
func CreateKey(ctx context.Context, db ledger.DBTX, role Role, merchantID, name string, now time.Time) (Key, string, error) {
	if !role.Valid() {
		return Key{}, "", fmt.Errorf("%w: role %q (merchant, auditor, operator or admin)", ErrInvalidKey, role)
	}
	if (role == RoleMerchant) != (merchantID != "") {
		return Key{}, "", fmt.Errorf("%w: a merchant key names exactly one merchant; other roles name none", ErrInvalidKey)
	}
	if utf8.RuneCountInString(name) > 200 || !pgtext.Valid(name) {
		return Key{}, "", fmt.Errorf("%w: name must be up to 200 characters of valid UTF-8 without NUL", ErrInvalidKey)
	}
	if merchantID != "" {
		if _, err := merchants.Get(ctx, db, merchantID); err != nil {
			return Key{}, "", err
		}
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return Key{}, "", err
	}
	secret := SecretPrefix + strings.ToLower(b32.EncodeToString(raw))
	idb := make([]byte, 8)
	if _, err := rand.Read(idb); err != nil {
		return Key{}, "", err
	}
	k := Key{ID: "key_" + hex.EncodeToString(idb), Prefix: secret[:len(SecretPrefix)+6], Role: role,
		MerchantID: merchantID, Name: name, CreatedAt: now.UTC()}
	_, err := db.Exec(ctx, `INSERT INTO api_keys (id, prefix, secret_sha256, role, merchant_id, name, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`, k.ID, k.Prefix, hashSecret(secret), string(role), sqlcols.Nullable(merchantID), name, k.CreatedAt)
	if err != nil {
		return Key{}, "", fmt.Errorf("api: create key: %w", err)
	}
	return k, secret, nil
}

// RevokeKey revokes a key: it authenticates nothing from then on (in this
// process at once; in other API processes once their cached lookup is
// older than Config.AuthCacheTTL).
func RevokeKey(ctx context.Context, db ledger.DBTX, id string, now time.Time) error {
	revocations.Add(1) // before and after: a lookup racing the UPDATE is not kept
	defer revocations.Add(1)
	tag, err := db.Exec(ctx, `UPDATE api_keys SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL`, id, now)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: key %s (or already revoked)", errNotFound, id)
	}
	return nil
}

// Principal is who is calling: the authenticated key.
type Principal struct {
	KeyID      string
	Role       Role
	MerchantID string
}

type principalKey struct{}

// principalSlot carries a *Principal the access log reads after the
// request (authentication fills it).
type principalSlot struct{}

func principalFrom(ctx context.Context) Principal {
	p, _ := ctx.Value(principalKey{}).(Principal)
	return p
}

// authenticate reads the bearer key: 401 when absent, unknown or revoked.
// The secret is never logged.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get("Authorization")
		scheme, secret, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || !strings.HasPrefix(secret, SecretPrefix) || len(secret) > 200 {
			s.problem(w, r, errUnauthorized)
			return
		}
		p, ok, err := s.keys.lookup(r.Context(), s.pool, hashSecret(secret))
		if err != nil {
			s.problem(w, r, err)
			return
		}
		if !ok {
			s.problem(w, r, errUnauthorized)
			return
		}
		if slot, ok := r.Context().Value(principalSlot{}).(*Principal); ok {
			*slot = p
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

// revocations counts RevokeKey calls in this process: a cached lookup
// made before the latest one is not trusted.
var revocations atomic.Uint64

// keyCache keeps successful key lookups for a short time, so a request does
// not pay a database round trip to authenticate (issue 19). Unknown and
// revoked keys are never cached. A revocation made in this process
// (RevokeKey: the admin route, saldo keys in the same process) empties it
// at once; one made elsewhere is seen within ttl.
type keyCache struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[[32]byte]cachedKey
}

type cachedKey struct {
	p          Principal
	until      time.Time
	generation uint64
}

// maxCachedKeys bounds the cache; past it, the cache starts over.
const maxCachedKeys = 10_000

func (c *keyCache) lookup(ctx context.Context, db ledger.DBTX, hash []byte) (Principal, bool, error) {
	var k [32]byte
	copy(k[:], hash)
	gen := revocations.Load()
	if c.ttl > 0 {
		c.mu.Lock()
		e, ok := c.m[k]
		c.mu.Unlock()
		if ok && e.generation == gen && time.Now().Before(e.until) {
			return e.p, true, nil
		}
	}
	var p Principal
	var merchantID *string
	var role string
	err := db.QueryRow(ctx, `SELECT id, role, merchant_id FROM api_keys
		WHERE secret_sha256 = $1 AND revoked_at IS NULL`, hash).Scan(&p.KeyID, &role, &merchantID)
	if errors.Is(err, pgx.ErrNoRows) {
		return Principal{}, false, nil
	}
	if err != nil {
		return Principal{}, false, err
	}
	p.Role, p.MerchantID = Role(role), sqlcols.Deref(merchantID)
	if c.ttl > 0 && revocations.Load() == gen {
		c.mu.Lock()
		if c.m == nil || len(c.m) >= maxCachedKeys {
			c.m = make(map[[32]byte]cachedKey)
		}
		c.m[k] = cachedKey{p: p, until: time.Now().Add(c.ttl), generation: gen}
		c.mu.Unlock()
	}
	return p, true, nil
}

// allow lets only the given roles through (403 otherwise).
func (s *Server) allow(roles ...Role) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p := principalFrom(r.Context())
			for _, role := range roles {
				if p.Role == role {
					next.ServeHTTP(w, r)
					return
				}
			}
			s.problem(w, r, errForbidden)
		})
	}
}

// merchantScope guards /v1/merchants/{merchant_id}/...: a merchant key sees
// only its own merchant (another one is 404, not 403: no probing); for other
// roles the merchant must exist.
func (s *Server) merchantScope(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := principalFrom(r.Context())
		id := chi.URLParam(r, "merchant_id")
		if p.Role == RoleMerchant {
			if id != p.MerchantID {
				s.problem(w, r, errNotFound)
				return
			}
		} else if _, err := merchants.Get(r.Context(), s.pool, id); err != nil {
			s.problem(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

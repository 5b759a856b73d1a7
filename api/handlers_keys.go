package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/saldo/saldo/ledger"
)

const keyColumns = `id, prefix, role, coalesce(merchant_id, ''), name, created_at, revoked_at`

func scanKey(row pgx.Row) (Key, error) {
	var k Key
	var role string
	err := row.Scan(&k.ID, &k.Prefix, &role, &k.MerchantID, &k.Name, &k.CreatedAt, &k.RevokedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return k, errNotFound
	}
	k.Role = Role(role)
	k.CreatedAt = k.CreatedAt.UTC()
	k.RevokedAt = utcPtr(k.RevokedAt)
	return k, err
}

// GetKey returns a stored key (never its secret).
func GetKey(ctx context.Context, db ledger.DBTX, id string) (Key, error) {
	return scanKey(db.QueryRow(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE id = $1`, id))
}

// listKeys pages through keys by id (admin), revoked ones included.
func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) {
	limit, err := limitParam(r, 100)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	if limit == 0 {
		limit = 100
	}
	rows, err := s.pool.Query(r.Context(), `SELECT `+keyColumns+` FROM api_keys
		WHERE id > $1 AND ($2 = '' OR merchant_id = $2) ORDER BY id LIMIT $3`,
		r.URL.Query().Get("cursor"), r.URL.Query().Get("merchant_id"), limit+1)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	keys, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Key, error) { return scanKey(row) })
	if err != nil {
		s.problem(w, r, err)
		return
	}
	next := ""
	if len(keys) > limit {
		keys = keys[:limit]
		next = keys[len(keys)-1].ID
	}
	writeJSON(w, http.StatusOK, pageOf(keys, next))
}

// revokeKey revokes a key (admin); revoking a revoked key changes nothing
// and answers the key as it is. An admin cannot revoke the key it calls
// with (it would lock itself out mid-request; use another admin key). With
// an Idempotency-Key the answer is stored in the revocation's own
// transaction (completeIdempotentInTx): a retry after a lost COMMIT answer
// replays it, and a request a retry took over revokes nothing (R4, R5).
func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "key_id")
	if id == principalFrom(r.Context()).KeyID {
		s.problem(w, r, &apiError{status: http.StatusConflict, code: "own_key", title: "Own key",
			detail: "a key cannot revoke itself; use another admin key"})
		return
	}
	var k Key
	revoked := false
	err := pgx.BeginFunc(r.Context(), s.pool, func(tx pgx.Tx) error {
		var err error
		// Locked: a concurrent revocation waits, then answers the key as
		// this one revoked it.
		if k, err = scanKey(tx.QueryRow(r.Context(), `SELECT `+keyColumns+` FROM api_keys WHERE id = $1 FOR UPDATE`, id)); err != nil {
			return err
		}
		revoked = false
		if k.RevokedAt == nil {
			if err := RevokeKey(r.Context(), tx, id, s.clock.Now()); err != nil {
				return err
			}
			if k, err = GetKey(r.Context(), tx, id); err != nil {
				return err
			}
			revoked = true
		}
		return s.completeIdempotentInTx(r.Context(), tx, r, http.StatusOK, k, w.Header())
	})
	// RevokeKey's own marks came before this COMMIT: a key lookup made
	// between them and the COMMIT read the key unrevoked, and must not be
	// kept in this process's cache.
	revocations.Add(1)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	if revoked {
		s.log.InfoContext(r.Context(), "api: key revoked", "key_id", id, "by", principalFrom(r.Context()).KeyID)
	}
	writeJSON(w, http.StatusOK, k)
}

package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/api"
	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/payouts"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/sim"
)

// bareAPI is a bare API on a real port (no OpenAPI validation, so
// these tests do not depend on the document), with merchant m1 and its key.
type bareAPI struct {
	pool *pgxpool.Pool
	url  string
	m1   string
	logs *syncBuffer
}

func newBareAPI(t *testing.T, allowPrivate bool) *bareAPI {
	t.Helper()
	ctx := context.Background()
	pool := testdb.New(t)
	srv := sim.NewServer(sim.Config{}).Start()
	t.Cleanup(srv.Close)
	prov := srv.NewProvider()
	att, err := attempts.New(attempts.Config{Pool: pool, Providers: map[string]providers.Provider{"sim": prov}})
	require.NoError(t, err)
	pay, err := payouts.New(payouts.Config{Pool: pool, Attempts: att, Provider: "sim"})
	require.NoError(t, err)
	_, err = merchants.Create(ctx, pool, "m1", "Loja")
	require.NoError(t, err)
	_, m1, err := api.CreateKey(ctx, pool, api.RoleMerchant, "m1", "m1", time.Now())
	require.NoError(t, err)
	logs := &syncBuffer{}
	a, err := api.New(api.Config{Pool: pool, Payouts: pay, Attempts: att,
		Logger:                       slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Providers:                    map[string]providers.Provider{"sim": prov},
		AllowPrivateNotificationURLs: allowPrivate})
	require.NoError(t, err)
	h := httptest.NewServer(a)
	t.Cleanup(h.Close)
	return &bareAPI{pool: pool, url: h.URL, m1: m1, logs: logs}
}

// register POSTs {"url": u} as m1; safe for concurrent use.
func (x *bareAPI) register(u string) (int, []byte, error) {
	b, _ := json.Marshal(map[string]string{"url": u})
	req, err := http.NewRequest(http.MethodPost, x.url+"/v1/merchants/m1/notification-endpoints", bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+x.m1)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return res.StatusCode, body, err
}

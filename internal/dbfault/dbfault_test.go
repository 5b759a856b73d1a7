package dbfault_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/internal/dbfault"
)

func TestUnavailable(t *testing.T) {
	// A real refused connection: nothing listens on the port.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = pgx.Connect(ctx, "postgres://postgres@"+addr+"/postgres?connect_timeout=2")
	require.Error(t, err)
	require.True(t, dbfault.Unavailable(err), "refused connection: %v", err)
	require.True(t, dbfault.Unavailable(fmt.Errorf("river: %w", err)), "wrapped")

	for code, want := range map[string]bool{
		"08006": true, "57P01": true, "57P03": true, "53300": true, // outages
		"23505": false, "40001": false, "22P02": false, "42P01": false, // answers
	} {
		require.Equal(t, want, dbfault.Unavailable(&pgconn.PgError{Code: code}), code)
	}
	require.False(t, dbfault.Unavailable(nil))
	require.False(t, dbfault.Unavailable(errors.New("something else")))
	require.False(t, dbfault.Unavailable(pgx.ErrNoRows))
}

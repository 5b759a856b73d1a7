package pgcluster

import (
	"context"
	"fmt"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

// StartContainer starts PostgreSQL 15 in a container with testcontainers-go,
// when a Docker engine answers. It returns the superuser URL of database
// "postgres" and a function that removes the container.
func StartContainer(ctx context.Context) (string, func(context.Context) error, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return "", nil, err
	}
	if err := p.Health(ctx); err != nil {
		return "", nil, fmt.Errorf("no Docker engine: %w", err)
	}
	c, err := tcpostgres.Run(ctx, "postgres:15-alpine",
		tcpostgres.WithDatabase("postgres"),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		tcpostgres.BasicWaitStrategies(),
	)
	if err != nil {
		return "", nil, err
	}
	u, err := c.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		_ = c.Terminate(context.Background())
		return "", nil, err
	}
	return u, func(ctx context.Context) error { return c.Terminate(ctx) }, nil
}

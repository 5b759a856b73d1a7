package reconcile

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// CatchUp is what the daily job of provider's day does first (catchUp),
// with River client c.
func (s *Service) CatchUp(ctx context.Context, c *river.Client[pgx.Tx], provider string, day time.Time) error {
	return s.catchUp(ctx, c, provider, day)
}

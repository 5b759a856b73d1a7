package engine_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/attempts"
	"github.com/saldo/saldo/charges"
	"github.com/saldo/saldo/internal/engine"
	"github.com/saldo/saldo/internal/testdb"
	"github.com/saldo/saldo/merchants"
	"github.com/saldo/saldo/money"
	"github.com/saldo/saldo/providers"
	"github.com/saldo/saldo/providers/pix"
	"github.com/saldo/saldo/providers/pix/pixtest"
)

// cobClock is the wall clock moved forward by an offset.
type cobClock struct{ off atomic.Int64 }

func (c *cobClock) Now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *cobClock) Advance(d time.Duration) { c.off.Add(int64(d)) }

// R15, R18: the longest cob a charge may ask for (charges.MaxPixExpiry,
// 23 h) expires unpaid without ever reaching the review queue under saldo
// serve's defaults. The Pix adapter reports an unpaid cob "processing"
// until its expiry plus ExpiryGrace (10 min), and the resolver sends an
// attempt "processing" to review at the later of ProcessingReviewAfter
// (24 h) and the cob's own expected end (its expiry plus the grace, plus
// --processing-expected-margin). A 24 h cob, accepted once, went to review
// with its alert minutes before it simply expired (found by review); the
// expected end now prevents that for any length, and 23 h stays the API's
// documented longest cob.
func TestLongestPixCobExpiresWithoutReview_R15_R18(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	certs, err := pixtest.NewCerts(t.TempDir())
	require.NoError(t, err)
	srv := pixtest.NewServer(certs, pixtest.Options{ClientID: "saldo", ClientSecret: "s3cret", ReceivingKey: pixKey})
	t.Cleanup(srv.Close)
	clock := &cobClock{}
	prov, err := pix.New(pix.Config{BaseURL: srv.StandardURL(), SendBaseURL: srv.SendURL(), TokenURL: srv.TokenURL(),
		ClientID: "saldo", ClientSecret: "s3cret", CertFile: certs.ClientCertFile, KeyFile: certs.ClientKeyFile,
		CAFile: certs.CAFile, ReceivingKey: pixKey, WebhookSecret: "w3bh00k", ConsistencyWindow: time.Second,
		HTTP: providers.HTTPSettings{ConnectTimeout: time.Second, ReadTimeout: 2 * time.Second}, Now: clock.Now})
	require.NoError(t, err)
	routes, err := providers.ParseRoutes("pix_charge=pix,pix_transfer=pix,bank_payout=pix")
	require.NoError(t, err)
	// The defaults of saldo serve: ProcessingReviewAfter 24h, the default
	// resolve schedule.
	e, err := engine.New(engine.Config{Pool: pool, Providers: []providers.Provider{prov}, Routes: routes, Clock: clock})
	require.NoError(t, err)
	_, err = merchants.Create(ctx, pool, "m1", "Loja")
	require.NoError(t, err)

	_, err = e.Charges.Create(ctx, charges.ChargeRequest{MerchantID: "m1", Kind: charges.KindPix,
		Amount: money.MustParse("30.00", "BRL"), PixExpiresIn: 24 * time.Hour})
	require.ErrorIs(t, err, charges.ErrInvalid, "23 h is the longest cob the API takes")
	ch, err := e.Charges.Create(ctx, charges.ChargeRequest{MerchantID: "m1", Kind: charges.KindPix,
		Amount: money.MustParse("30.00", "BRL"), PixExpiresIn: charges.MaxPixExpiry})
	require.NoError(t, err)
	res, err := e.Attempts.Execute(ctx, *ch.AttemptID)
	require.NoError(t, err)
	require.Equal(t, attempts.StatusPending, res.Attempt.Status)
	require.Equal(t, string(providers.StateProcessing), res.Attempt.ProviderState)

	// A minute past its expiry, unpaid: the adapter gives the PSP
	// ExpiryGrace before calling it expired.
	clock.Advance(charges.MaxPixExpiry + time.Minute)
	rr, err := e.Attempts.Resolve(ctx, res.Attempt.ID)
	require.NoError(t, err)
	t.Logf("a minute past expiry: status %s provider_state %s review %v (%s)", rr.Attempt.Status, rr.Attempt.ProviderState,
		rr.Attempt.Review, rr.Attempt.ReviewReason)

	// 11 more minutes: the poll finds it expired.
	clock.Advance(11 * time.Minute)
	pr, err := e.Charges.Poll(ctx, ch.ID)
	require.NoError(t, err)
	require.Equal(t, charges.StatusExpired, pr.Charge.Status, "an unpaid cob expires")
	got, err := e.Attempts.Get(ctx, pool, res.Attempt.ID)
	require.NoError(t, err)
	require.False(t, rr.Attempt.Review || got.Review,
		"the longest unpaid cob was put in review before it expired: %s", got.ReviewReason)
}

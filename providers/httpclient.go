package providers

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultTLSHandshakeTimeout bounds a TLS handshake when HTTPSettings
// names none.
const DefaultTLSHandshakeTimeout = 5 * time.Second

// DefaultMaxIdleConnsPerHost is HTTPSettings.MaxIdleConnsPerHost's default.
const DefaultMaxIdleConnsPerHost = 256

// HTTPSettings are one provider's HTTP client settings (R3): a short connect
// timeout so a provider that is down fails fast as "not sent", and a generous
// read timeout, because a short one manufactures unknowns.
type HTTPSettings struct {
	// ConnectTimeout bounds DNS + TCP connect. Default 3s.
	ConnectTimeout time.Duration
	// TLSHandshakeTimeout bounds the TLS handshake. Default 5s.
	TLSHandshakeTimeout time.Duration
	// ReadTimeout bounds everything after the request is written: waiting for
	// the response head and reading the body. Default 30s.
	ReadTimeout time.Duration
	// TLS is an optional TLS configuration (mTLS for Pix PSPs, custom roots).
	TLS *tls.Config
	// MaxBodyBytes caps how much of a response body is read. Default 1 MiB.
	MaxBodyBytes int64
	// DenyPrivateNetworks refuses to connect to loopback, private,
	// link-local, CGNAT, multicast and unspecified addresses, checked on the
	// address actually dialled (after DNS, so rebinding cannot dodge it).
	// For clients that call URLs chosen by others (merchant notification
	// endpoints): no server-side request forgery into the platform.
	//
	// It also turns proxies off (HTTP_PROXY and the like are ignored): a
	// proxy resolves and dials the target itself, so the check would only
	// ever see the proxy's address.
	DenyPrivateNetworks bool
	// MaxIdleConnsPerHost is how many kept-alive connections to one host
	// wait for the next call. Default 256: at least as many as calls in
	// flight at once (the River workers that submit and look up), or every
	// burst above it closes its connections after one call and the next
	// burst dials (and, over TLS, handshakes) again.
	MaxIdleConnsPerHost int
}

// ErrPrivateAddress: DenyPrivateNetworks refused the address.
var ErrPrivateAddress = errors.New("providers: refusing to connect to a private or local address")

var cgnat = net.IPNet{IP: net.IPv4(100, 64, 0, 0), Mask: net.CIDRMask(10, 32)}

// denyPrivate is a net.Dialer Control function for DenyPrivateNetworks.
func denyPrivate(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || PrivateAddress(ip) || OwnAddress(ip) {
		return fmt.Errorf("%w: %s", ErrPrivateAddress, host)
	}
	return nil
}

// OwnAddress reports whether ip is one of this host's own interface
// addresses (read at most once a minute). A connection to it stays on the
// host, past any outside firewall, whatever range it is in: a public
// address on a bare-metal interface reached the host's own services
// (found by review).
func OwnAddress(ip net.IP) bool {
	ownAddrs.mu.Lock()
	defer ownAddrs.mu.Unlock()
	if ownAddrs.ips == nil || time.Since(ownAddrs.at) > time.Minute {
		addrs, err := net.InterfaceAddrs()
		if err != nil {
			return true // cannot tell: never dial it
		}
		ownAddrs.ips, ownAddrs.at = ownAddrs.ips[:0], time.Now()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				ownAddrs.ips = append(ownAddrs.ips, n.IP)
			}
		}
	}
	for _, own := range ownAddrs.ips {
		if own.Equal(ip) {
			return true
		}
	}
	return false
}

var ownAddrs struct {
	mu  sync.Mutex
	at  time.Time
	ips []net.IP
}

// PrivateAddress reports whether ip is one DenyPrivateNetworks refuses:
// loopback, private, link-local, CGNAT, multicast or unspecified (IPv4
// mapped into IPv6 included), and IPv6 addresses that carry an IPv4
// address a translator or tunnel may deliver inside the network:
//
//   - 64:ff9b::/96, NAT64's well-known prefix (RFC 6052): the embedded
//     IPv4 address (the last 32 bits) is checked, so a public host reached
//     through DNS64 stays reachable while 64:ff9b::a00:5 (10.0.0.5) and
//     64:ff9b::a9fe:a9fe (169.254.169.254) are refused;
//   - 64:ff9b:1::/48, NAT64's local-use prefix (RFC 8215), where the IPv4
//     address sits where the operator's prefix length puts it: refused;
//   - 2002::/16 (6to4), ::/96 (IPv4-compatible) and ::ffff:0:0:0/96
//     (SIIT's IPv4-translated): deprecated or internal, refused.
func PrivateAddress(ip net.IP) bool {
	if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() || cgnat.Contains(ip) {
		return true
	}
	for _, n := range specialPurpose {
		if n.Contains(ip) {
			return true
		}
	}
	if ip.To4() != nil {
		return false
	}
	ip16 := ip.To16()
	if ip16 == nil {
		return true // not an IP address: never dial it
	}
	if nat64WellKnown.Contains(ip16) {
		return PrivateAddress(net.IPv4(ip16[12], ip16[13], ip16[14], ip16[15]))
	}
	for _, n := range embeddingIPv4 {
		if n.Contains(ip16) {
			return true
		}
	}
	return false
}

// specialPurpose are the other ranges of the IANA special-purpose
// registries (RFC 6890) no public receiver sits in: "this network",
// IETF protocol assignments, documentation, benchmarking, reserved and
// broadcast; IPv6 discard-only, documentation and the deprecated
// site-local.
var specialPurpose = []*net.IPNet{
	mustCIDR("0.0.0.0/8"), mustCIDR("192.0.0.0/24"), mustCIDR("192.0.2.0/24"), mustCIDR("198.18.0.0/15"),
	mustCIDR("198.51.100.0/24"), mustCIDR("203.0.113.0/24"), mustCIDR("240.0.0.0/4"),
	mustCIDR("100::/64"), mustCIDR("2001:db8::/32"), mustCIDR("fec0::/10"),
}

// nat64WellKnown is 64:ff9b::/96 (RFC 6052): the last 32 bits are IPv4.
var nat64WellKnown = mustCIDR("64:ff9b::/96")

// embeddingIPv4 are the other IPv6 prefixes that carry an IPv4 address a
// translator or tunnel may deliver (see PrivateAddress): refused outright.
var embeddingIPv4 = []*net.IPNet{
	mustCIDR("64:ff9b:1::/48"),  // NAT64 local use (RFC 8215)
	mustCIDR("2002::/16"),       // 6to4 (RFC 3056)
	mustCIDR("::/96"),           // IPv4-compatible (RFC 4291, deprecated)
	mustCIDR("::ffff:0:0:0/96"), // IPv4-translated (RFC 2765)
}

func mustCIDR(s string) *net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return n
}

func (s HTTPSettings) withDefaults() HTTPSettings {
	if s.ConnectTimeout <= 0 {
		s.ConnectTimeout = 3 * time.Second
	}
	if s.TLSHandshakeTimeout <= 0 {
		s.TLSHandshakeTimeout = DefaultTLSHandshakeTimeout
	}
	if s.ReadTimeout <= 0 {
		s.ReadTimeout = 30 * time.Second
	}
	if s.MaxBodyBytes <= 0 {
		s.MaxBodyBytes = 1 << 20
	}
	if s.MaxIdleConnsPerHost <= 0 {
		s.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	}
	return s
}

// Client makes single HTTP exchanges and reports what happened on the wire.
// It never retries. The zero value is not usable; build one with NewClient.
type Client struct {
	settings HTTPSettings
	http     *http.Client
}

// NewClient builds a Client with its own Transport (so one provider's pool
// and timeouts never affect another's).
func NewClient(s HTTPSettings) *Client {
	s = s.withDefaults()
	dialer := &net.Dialer{Timeout: s.ConnectTimeout, KeepAlive: 30 * time.Second}
	proxy := http.ProxyFromEnvironment
	if s.DenyPrivateNetworks {
		dialer.Control = denyPrivate
		proxy = nil // the check must see the target's address, not a proxy's
	}
	tr := &http.Transport{
		Proxy:                 proxy,
		DialContext:           dialer.DialContext,
		TLSClientConfig:       s.TLS,
		TLSHandshakeTimeout:   s.TLSHandshakeTimeout,
		ResponseHeaderTimeout: s.ReadTimeout,
		MaxIdleConns:          max(100, 4*s.MaxIdleConnsPerHost),
		MaxIdleConnsPerHost:   s.MaxIdleConnsPerHost,
		IdleConnTimeout:       60 * time.Second,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     s.TLS != nil,
	}
	return &Client{settings: s, http: &http.Client{
		Transport: tr,
		// No Timeout here: it would hide which phase failed (docs/pitfalls.md).
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// Settings returns the effective settings.
func (c *Client) Settings() HTTPSettings { return c.settings }

// CloseIdle closes idle connections (tests use it to force fresh connects).
func (c *Client) CloseIdle() { c.http.CloseIdleConnections() }

// RequestIDHeaders are the response headers read as the provider's request id.
var RequestIDHeaders = []string{"Request-Id", "X-Request-Id"}

// Do performs ONE exchange: builds the request, sends it, reads the body under
// the read deadline, and reports what happened. It never returns an error:
// everything is in the Exchange. body may be nil; it is sent as
// application/json unless header names another Content-Type.
func (c *Client) Do(ctx context.Context, method, url string, header http.Header, body []byte) (ex Exchange) {
	// ex is a named result so the deferred Ended stamp reaches the caller.
	ex = Exchange{Method: method, URL: url, Started: time.Now()}
	defer func() { ex.Ended = time.Now() }()

	var mu sync.Mutex
	trace := &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) {
			mu.Lock()
			ex.Connected = true
			mu.Unlock()
		},
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			mu.Lock()
			defer mu.Unlock()
			if info.Err == nil {
				ex.Wrote = true
				ex.WireCalls++
			}
		},
	}
	// The read budget covers the head AND the body: a 200 whose body never
	// arrives is unknown, not success (docs/pitfalls.md). The connect phase has its
	// own dialer timeout, so the overall deadline is connect + read.
	ctx, cancel := context.WithTimeout(ctx, c.settings.ConnectTimeout+c.settings.TLSHandshakeTimeout+c.settings.ReadTimeout)
	defer cancel()
	ctx = httptrace.WithClientTrace(ctx, trace)

	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		ex.Err = err
		return ex
	}
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if body != nil {
		if req.Header.Get("Content-Type") == "" {
			// JSON unless the adapter says otherwise (Stripe's v1 API
			// takes form-encoded bodies).
			req.Header.Set("Content-Type", "application/json")
		}
		// Let net/http rebuild the body if it transparently replays on a dead
		// keep-alive connection (counted in WireCalls).
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}

	resp, err := c.http.Do(req)
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		ex.Err = err
		ex.Timeout = isTimeout(err)
		return ex
	}
	defer resp.Body.Close()
	ex.StatusCode = resp.StatusCode
	ex.Header = resp.Header
	for _, h := range RequestIDHeaders {
		if v := resp.Header.Get(h); v != "" {
			ex.ProviderRequestID = v
			break
		}
	}
	ex.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	b, err := io.ReadAll(io.LimitReader(resp.Body, c.settings.MaxBodyBytes))
	ex.Body = b
	if err != nil {
		ex.Err = err
		ex.Timeout = isTimeout(err)
	}
	return ex
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// MaxRetryAfter bounds a Retry-After: a rate limit is minutes at most, and
// a larger delay (a provider's bug, a hostile proxy: "Retry-After:
// 3153600000" is 100 years, and a larger one overflows time.Duration)
// would park the attempt, and the money it holds, for that long. One hour
// is longer than any provider's documented rate-limit window; callers may
// cap it further with their own schedules.
const MaxRetryAfter = time.Hour

// parseRetryAfter reads delay-seconds or an HTTP date, capped at
// MaxRetryAfter (a value too large to parse as an int counts as the cap).
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil && secs >= 0 {
		if secs > int64(MaxRetryAfter/time.Second) {
			return MaxRetryAfter
		}
		return time.Duration(secs) * time.Second
	} else if errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(v, "-") {
		return MaxRetryAfter
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), MaxRetryAfter)
	}
	return 0
}

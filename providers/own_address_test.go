package providers_test

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/saldo/saldo/providers"
)

// No request forgery into the host itself: every address of this host's
// own interfaces is refused by DenyPrivateNetworks and at notification
// registration, whatever range it is in (a public address on a bare-metal
// interface reached the host's own services: found by review); so are the
// special-purpose ranges no public receiver sits in (RFC 6890).
func TestOwnAndSpecialPurposeAddressesAreRefused(t *testing.T) {
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	require.NotEmpty(t, addrs)
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			require.True(t, providers.OwnAddress(n.IP), "%s is this host's", n.IP)
		}
	}
	require.False(t, providers.OwnAddress(net.ParseIP("8.8.8.8")))
	for _, s := range []string{"0.1.2.3", "192.0.0.9", "192.0.2.2", "198.18.0.1", "198.51.100.7", "203.0.113.9",
		"240.0.0.1", "255.255.255.255", "2001:db8::1", "fec0::1", "100::1"} {
		require.True(t, providers.PrivateAddress(net.ParseIP(s)), s)
	}
	for _, s := range []string{"8.8.8.8", "1.1.1.1", "2606:4700::1111"} {
		require.False(t, providers.PrivateAddress(net.ParseIP(s)), s)
	}
}

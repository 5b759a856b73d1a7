package providers

import (
	"net"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// With DenyPrivateNetworks, a configured HTTP proxy would dial the target
// itself, and the dial check would only see the proxy's address (issue 13):
// such a client never uses a proxy. Others still honour HTTP_PROXY.
func TestDenyPrivateNetworksNeverUsesAProxy(t *testing.T) {
	deny := NewClient(HTTPSettings{DenyPrivateNetworks: true})
	require.Nil(t, deny.http.Transport.(*http.Transport).Proxy,
		"a proxy resolves and dials the target: the private-address check must see the target")
	plain := NewClient(HTTPSettings{})
	require.NotNil(t, plain.http.Transport.(*http.Transport).Proxy)
}

// PrivateAddress is the one definition of "inside the platform's network"
// (the dial check and the API's registration check share it).
func TestPrivateAddress(t *testing.T) {
	for _, s := range []string{"127.0.0.1", "::1", "10.0.0.1", "172.16.0.1", "192.168.1.1", "169.254.169.254", "fe80::1",
		"100.64.0.1", "0.0.0.0", "::", "::ffff:127.0.0.1", "224.0.0.1"} {
		require.True(t, PrivateAddress(net.ParseIP(s)), s)
	}
	for _, s := range []string{"93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c", "100.128.0.1"} {
		require.False(t, PrivateAddress(net.ParseIP(s)), s)
	}
}

// Package pixtest is a fake Pix PSP for tests: an httptest TLS server that
// requires a client certificate (mutual TLS, with a CA made on the spot),
// issues OAuth2 client-credentials tokens, and serves the BCB API Pix
// (cob, devolucao, GET /pix) and Efí's send API in their documented request
// and response shapes, with problem+json errors. It keeps every request so
// tests can check them field by field, and injects faults (a hang after the
// operation was committed, a canned answer, lookup lag, revoked tokens).
package pixtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Certs is a test CA and the server and client certificates it signed,
// written as PEM files under Dir (what saldo's configuration points at).
type Certs struct {
	Dir            string
	CAFile         string
	ClientCertFile string
	ClientKeyFile  string
	// CA is the pool holding the test CA.
	CA *x509.CertPool
	// Server is the server's certificate (127.0.0.1, ::1 and localhost).
	Server tls.Certificate
	// Client is the client certificate, for tests that build TLS by hand.
	Client tls.Certificate
}

// NewCerts makes a CA, a server certificate and a client certificate, and
// writes ca.pem, client.pem and client-key.pem into dir.
func NewCerts(dir string) (*Certs, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pixtest CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage, server bool) ([]byte, *ecdsa.PrivateKey, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		t := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
		if server {
			t.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
			t.DNSNames = []string{"localhost"}
		}
		der, err := x509.CreateCertificate(rand.Reader, t, caCert, &key.PublicKey, caKey)
		return der, key, err
	}
	srvDER, srvKey, err := issue(2, "pixtest server", x509.ExtKeyUsageServerAuth, true)
	if err != nil {
		return nil, err
	}
	cliDER, cliKey, err := issue(3, "saldo client", x509.ExtKeyUsageClientAuth, false)
	if err != nil {
		return nil, err
	}
	c := &Certs{Dir: dir, CAFile: filepath.Join(dir, "ca.pem"), ClientCertFile: filepath.Join(dir, "client.pem"),
		ClientKeyFile: filepath.Join(dir, "client-key.pem"), CA: x509.NewCertPool()}
	c.CA.AddCert(caCert)
	if err := writePEM(c.CAFile, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	if err := writePEM(c.ClientCertFile, "CERTIFICATE", cliDER); err != nil {
		return nil, err
	}
	cliKeyDER, err := x509.MarshalECPrivateKey(cliKey)
	if err != nil {
		return nil, err
	}
	if err := writePEM(c.ClientKeyFile, "EC PRIVATE KEY", cliKeyDER); err != nil {
		return nil, err
	}
	c.Server = tls.Certificate{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}
	c.Client = tls.Certificate{Certificate: [][]byte{cliDER}, PrivateKey: cliKey}
	return c, nil
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// ServerTLS requires a client certificate signed by the test CA.
func (c *Certs) ServerTLS() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{c.Server}, ClientAuth: tls.RequireAndVerifyClientCert,
		ClientCAs: c.CA, MinVersion: tls.VersionTLS12}
}

// Package testcert makes throwaway certificate authorities and leaf
// certificates for tests: TLS Redis servers, gRPC TLS and mTLS. It is test
// support only; nothing it makes may protect anything real.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// CA is a self-signed certificate authority valid for a day.
type CA struct {
	Cert *x509.Certificate
	// PEM is Cert, PEM-encoded: what a peer needs to trust the CA.
	PEM []byte
	key *ecdsa.PrivateKey
}

// NewCA returns a new CA named name.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("testcert: CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("testcert: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("testcert: CA certificate: %w", err)
	}
	return &CA{Cert: cert, PEM: encode("CERTIFICATE", der), key: key}, nil
}

// Issue signs a leaf certificate for 127.0.0.1 and localhost, for server
// or client authentication, and returns it and its key as PEM.
func (ca *CA) Issue(name string, serial int64, server bool) (certPEM, keyPEM []byte, err error) {
	usage := x509.ExtKeyUsageClientAuth
	if server {
		usage = x509.ExtKeyUsageServerAuth
	}
	return ca.issue(name, serial, usage)
}

// IssueDual is Issue for a certificate that is both a server's and a
// client's, as Envoy Gateway's rate-limit certificate is (its gRPC server
// and its xDS client use one tls.crt).
func (ca *CA) IssueDual(name string, serial int64) (certPEM, keyPEM []byte, err error) {
	return ca.issue(name, serial, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
}

func (ca *CA) issue(name string, serial int64, usage ...x509.ExtKeyUsage) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("testcert: %s key: %w", name, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("testcert: %s certificate: %w", name, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("testcert: %s key: %w", name, err)
	}
	return encode("CERTIFICATE", der), encode("EC PRIVATE KEY", kder), nil
}

// IssueTLS is Issue for a peer served in-process: the leaf and its key as a
// tls.Certificate.
func (ca *CA) IssueTLS(name string, serial int64, server bool) (tls.Certificate, error) {
	certPEM, keyPEM, err := ca.Issue(name, serial, server)
	if err != nil {
		return tls.Certificate{}, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("testcert: %s key pair: %w", name, err)
	}
	return pair, nil
}

func encode(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// Package tlsfiles builds the client side of a TLS configuration from PEM
// files: the CA to trust and, for mutual TLS, the certificate and key to
// present. Every outbound connection that takes TLS files (Redis, the xDS
// server, the check and override commands) loads them here, so they all
// accept and reject the same files with the same words.
//
// It reads files once, when asked; it does not watch or reload them
// (pkg/certreload serves reloadable server certificates), and it imports
// nothing outside the standard library.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Files names the PEM files of a TLS client. Every field may be empty:
// no CA keeps the system roots, no certificate and key presents none.
type Files struct {
	// CA is a PEM file of the certificates to trust instead of the
	// system roots.
	CA string
	// Cert and Key are the client certificate and its key, for servers
	// that require one; both or neither.
	Cert, Key string
}

// Config returns a client configuration (TLS 1.2 or later) loaded with f.
func Config(f Files) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if err := Load(c, f); err != nil {
		return nil, err
	}
	return c, nil
}

// Load sets c's RootCAs from f.CA and its client certificate from f.Cert
// and f.Key, and raises an unset MinVersion to TLS 1.2. It leaves c
// unchanged on error. The errors name what is wrong ("CA …",
// "client certificate …") for the caller to prefix with the setting.
func Load(c *tls.Config, f Files) error {
	if (f.Cert == "") != (f.Key == "") {
		return errors.New("client certificate and key must be given together")
	}
	var pool *x509.CertPool
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return fmt.Errorf("CA: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("CA %s: no PEM certificate found", f.CA)
		}
	}
	var certs []tls.Certificate
	if f.Cert != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return fmt.Errorf("client certificate: %w", err)
		}
		certs = []tls.Certificate{cert}
	}
	if c.MinVersion == 0 {
		c.MinVersion = tls.VersionTLS12
	}
	if pool != nil {
		c.RootCAs = pool
	}
	if certs != nil {
		c.Certificates = certs
	}
	return nil
}

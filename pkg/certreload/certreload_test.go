package certreload

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/testcert"
)

// files writes a server pair (serial) and the CA into dir and returns
// their paths.
type files struct{ cert, key, ca string }

func writePair(t *testing.T, ca *testcert.CA, dir string, serial int64, stamp time.Time) files {
	t.Helper()
	certPEM, keyPEM, err := ca.Issue("server", serial, true)
	if err != nil {
		t.Fatal(err)
	}
	f := files{filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")}
	for path, data := range map[string][]byte{f.cert: certPEM, f.key: keyPEM, f.ca: ca.PEM} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		// Distinct modification times, so a rotation to a pair of the
		// same sizes is still seen.
		if err := os.Chtimes(path, stamp, stamp); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func newCA(t *testing.T) *testcert.CA {
	t.Helper()
	ca, err := testcert.NewCA("certreload-test")
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// serial returns the serial number of the certificate cfg serves.
func serial(t *testing.T, cfg *tls.Config) int64 {
	t.Helper()
	leaf, err := x509.ParseCertificate(cfg.Certificates[0].Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.SerialNumber.Int64()
}

func current(t *testing.T, s *Server) *tls.Config {
	t.Helper()
	cfg, err := s.Config().GetConfigForClient(nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestNewServerErrors(t *testing.T) {
	dir := t.TempDir()
	f := writePair(t, newCA(t), dir, 1, time.Now())
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name          string
		cert, key, ca string
		want          string
	}{
		{"no cert", "", f.key, "", "both a certificate and a key file are required"},
		{"no key", f.cert, "", "", "both a certificate and a key file are required"},
		{"missing cert", filepath.Join(dir, "nope.crt"), f.key, "", "nope.crt: no such file"},
		{"garbage cert", garbage, f.key, "", "load " + garbage},
		{"missing ca", f.cert, f.key, filepath.Join(dir, "nope-ca.crt"), "nope-ca.crt: no such file"},
		{"garbage ca", f.cert, f.key, garbage, garbage + " holds no PEM certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewServer(tt.cert, tt.key, tt.ca)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "certreload: ") {
				t.Fatalf("NewServer: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestRotation: a rotated pair is served from the first handshake after
// the check interval; a half-written rotation keeps the previous pair and
// is reported, until the files are whole again.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t)
	t0 := time.Now().Add(-time.Hour)
	f := writePair(t, ca, dir, 1, t0)
	s, err := NewServer(f.cert, f.key, f.ca)
	if err != nil {
		t.Fatal(err)
	}
	clock := t0
	s.now = func() time.Time { return clock }
	s.lastCheck = clock
	if got := serial(t, current(t, s)); got != 1 {
		t.Fatalf("serving serial %d, want 1", got)
	}

	writePair(t, ca, dir, 2, t0.Add(time.Minute))
	if got := serial(t, current(t, s)); got != 1 {
		t.Fatalf("files checked again within %v: serving serial %d", checkEvery, got)
	}
	clock = clock.Add(checkEvery)
	if got := serial(t, current(t, s)); got != 2 {
		t.Fatalf("after rotation: serving serial %d, want 2", got)
	}

	// Half written: the certificate is garbage for a moment.
	if err := os.WriteFile(f.cert, []byte("-----BEGIN CERT"), 0o600); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(checkEvery)
	if got := serial(t, current(t, s)); got != 2 {
		t.Fatalf("half-written rotation: serving serial %d, want the previous 2", got)
	}
	if err := s.LastError(); err == nil || !strings.Contains(err.Error(), "load "+f.cert) {
		t.Fatalf("LastError = %v, want the failed load", err)
	}
	writePair(t, ca, dir, 3, t0.Add(2*time.Minute))
	clock = clock.Add(checkEvery)
	if got := serial(t, current(t, s)); got != 3 || s.LastError() != nil {
		t.Fatalf("after the rotation completed: serial %d, LastError %v", got, s.LastError())
	}
}

// TestMutualTLS: with a client CA, a real handshake on loopback needs a
// client certificate that CA signed.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t)
	f := writePair(t, ca, dir, 1, time.Now())
	s, err := NewServer(f.cert, f.key, f.ca)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", s.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			_, _ = c.Write([]byte("ok"))
			c.Close()
		}
	}()
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	dial := func(certs []tls.Certificate) error {
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", Certificates: certs})
		if err != nil {
			return err
		}
		defer c.Close()
		buf := make([]byte, 2)
		_, err = c.Read(buf) // TLS 1.3 reports a refused client certificate here
		return err
	}
	if err := dial(nil); err == nil {
		t.Fatal("handshake without a client certificate succeeded")
	}
	pair, err := ca.IssueTLS("client", 9, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := dial([]tls.Certificate{pair}); err != nil {
		t.Fatalf("handshake with a client certificate from the CA: %v", err)
	}
}

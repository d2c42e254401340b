package tlsfiles

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/testcert"
)

// writeFiles writes a CA certificate, a client certificate and its key,
// and a file that is no PEM, into a temporary directory.
func writeFiles(t *testing.T) (ca, cert, key, notPEM string) {
	t.Helper()
	authority, err := testcert.NewCA("tlsfiles test CA")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := authority.Issue("tlsfiles client", 2, false)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ca, cert, key, notPEM = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "not.pem")
	for name, data := range map[string][]byte{ca: authority.PEM, cert: certPEM, key: keyPEM, notPEM: []byte("hello")} {
		if err := os.WriteFile(name, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return ca, cert, key, notPEM
}

func TestConfig(t *testing.T) {
	ca, cert, key, notPEM := writeFiles(t)
	tests := []struct {
		name      string
		files     Files
		wantErr   string
		roots     bool
		certCount int
	}{
		{"none", Files{}, "", false, 0},
		{"CA", Files{CA: ca}, "", true, 0},
		{"CA and client certificate", Files{CA: ca, Cert: cert, Key: key}, "", true, 1},
		{"client certificate alone", Files{Cert: cert, Key: key}, "", false, 1},
		{"missing CA", Files{CA: filepath.Join(filepath.Dir(ca), "nope.pem")}, "CA: open", false, 0},
		{"CA not PEM", Files{CA: notPEM}, "CA " + notPEM + ": no PEM certificate found", false, 0},
		{"certificate without key", Files{CA: ca, Cert: cert}, "given together", false, 0},
		{"key without certificate", Files{Key: key}, "given together", false, 0},
		{"key is no key", Files{Cert: cert, Key: notPEM}, "client certificate: ", false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Config(tt.files)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Config(%+v) = %v, want an error with %q", tt.files, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Config(%+v): %v", tt.files, err)
			}
			if c.MinVersion != tls.VersionTLS12 || (c.RootCAs != nil) != tt.roots || len(c.Certificates) != tt.certCount {
				t.Errorf("Config(%+v) = min %x, roots %v, %d certificates; want TLS 1.2, roots %v, %d", tt.files, c.MinVersion, c.RootCAs != nil, len(c.Certificates), tt.roots, tt.certCount)
			}
		})
	}
}

// TestLoadKeepsOnError: a bad file leaves the configuration as it was, and
// a set MinVersion stays.
func TestLoadKeepsOnError(t *testing.T) {
	ca, cert, _, notPEM := writeFiles(t)
	c := &tls.Config{MinVersion: tls.VersionTLS13, ServerName: "x"}
	if err := Load(c, Files{CA: ca, Cert: cert, Key: notPEM}); err == nil {
		t.Fatal("Load with a bad key succeeded")
	}
	if c.RootCAs != nil || c.Certificates != nil || c.MinVersion != tls.VersionTLS13 {
		t.Errorf("a failed Load changed the configuration: %+v", c)
	}
	if err := Load(c, Files{CA: ca}); err != nil || c.RootCAs == nil || c.MinVersion != tls.VersionTLS13 || c.ServerName != "x" {
		t.Errorf("Load(CA) = %v; roots %v, min %x, server name %q", err, c.RootCAs != nil, c.MinVersion, c.ServerName)
	}
}

package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TLSFiles are the PEM files of a TLS-enabled server, for clients: the CA
// that signed the server certificate (valid for 127.0.0.1 and localhost)
// and a client certificate the server accepts.
type TLSFiles struct {
	CAFile, CertFile, KeyFile string
}

// StartStandaloneTLS starts a standalone server that accepts TLS on TLSAddr
// (and plain text on Addr), with client certificates required. It generates
// a throwaway CA, server and client certificates in the server's directory.
// The caller must Close it.
func StartStandaloneTLS() (*Server, error) {
	s, err := launch("tls", func(dir string, ports []int) ([]string, error) {
		if err := writeTLSFiles(dir); err != nil {
			return nil, err
		}
		return append(baseArgs(dir, ports[0]),
			"--tls-port", strconv.Itoa(ports[1]),
			"--tls-cert-file", filepath.Join(dir, "server.pem"),
			"--tls-key-file", filepath.Join(dir, "server-key.pem"),
			"--tls-ca-cert-file", filepath.Join(dir, "ca.pem"),
			"--tls-auth-clients", "yes",
		), nil
	}, 2)
	if err != nil {
		return nil, err
	}
	// launch took the second port for a cluster bus; here it is TLS.
	s.TLSAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.BusPort))
	s.BusPort = 0
	return s, nil
}

// StandaloneTLS starts a TLS server (see StartStandaloneTLS) for this test
// and stops it at cleanup.
func StandaloneTLS(t testing.TB) *Server {
	t.Helper()
	return startForTest(t, StartStandaloneTLS)
}

// TLSFiles returns the client-side PEM files of a server from
// StartStandaloneTLS.
func (s *Server) TLSFiles() TLSFiles {
	return TLSFiles{
		CAFile:   filepath.Join(s.Dir, "ca.pem"),
		CertFile: filepath.Join(s.Dir, "client.pem"),
		KeyFile:  filepath.Join(s.Dir, "client-key.pem"),
	}
}

// writeTLSFiles writes a CA, a server certificate for 127.0.0.1/localhost
// and a client certificate, all signed by the CA, into dir.
func writeTLSFiles(dir string) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redistest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("CA certificate: %w", err)
	}
	if err := writePEM(filepath.Join(dir, "ca.pem"), "CERTIFICATE", caDER); err != nil {
		return err
	}
	for i, leaf := range []struct {
		name  string
		usage x509.ExtKeyUsage
	}{{"server", x509.ExtKeyUsageServerAuth}, {"client", x509.ExtKeyUsageClientAuth}} {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(int64(i + 2)),
			Subject:      pkix.Name{CommonName: "redistest " + leaf.name},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{leaf.usage},
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
			DNSNames:     []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return fmt.Errorf("%s certificate: %w", leaf.name, err)
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		if err := writePEM(filepath.Join(dir, leaf.name+".pem"), "CERTIFICATE", der); err != nil {
			return err
		}
		if err := writePEM(filepath.Join(dir, leaf.name+"-key.pem"), "EC PRIVATE KEY", kder); err != nil {
			return err
		}
	}
	return nil
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

package redistest

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/testcert"
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
	ca, err := testcert.NewCA("redistest CA")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), ca.PEM, 0o600); err != nil {
		return err
	}
	for i, name := range []string{"server", "client"} {
		cert, key, err := ca.Issue("redistest "+name, int64(i+2), name == "server")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name+".pem"), cert, 0o600); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name+"-key.pem"), key, 0o600); err != nil {
			return err
		}
	}
	return nil
}

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/envoy-rls/envoy-rls/internal/testkit/eventually"
	"github.com/envoy-rls/envoy-rls/internal/testkit/testcert"
)

func newCA(t *testing.T, name string) *testcert.CA {
	t.Helper()
	ca, err := testcert.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// issue signs a leaf certificate with serial, for server or client use.
func issue(t *testing.T, ca *testcert.CA, serial int64, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	cert, key, err := ca.Issue(fmt.Sprintf("leaf-%d", serial), serial, server)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func writeBytes(t *testing.T, path string, data []byte) {
	t.Helper()
	writeFile(t, path, string(data))
}

// tlsClient returns a gRPC client trusting ca, presenting cert when given.
func tlsClient(t *testing.T, addr string, ca *testcert.CA, cert *tls.Certificate) pb.RateLimitServiceClient {
	t.Helper()
	cfg := &tls.Config{RootCAs: x509.NewCertPool(), MinVersion: tls.VersionTLS12}
	cfg.RootCAs.AddCert(ca.Cert)
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewRateLimitServiceClient(conn)
}

func keyPair(t *testing.T, certPEM, keyPEM []byte) *tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

// TestMTLS serves gRPC with a client CA: clients without a certificate, with
// one from another CA, or in plaintext are refused; a client with a valid
// certificate is served, also by `envoy-rls check`. Rotating the server's
// files makes new handshakes present the new certificate without a restart.
func TestMTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := newCA(t, "e2e-ca")
	srvCert, srvKey := issue(t, ca, 100, true)
	cliCert, cliKey := issue(t, ca, 200, false)
	files := map[string][]byte{"ca.pem": ca.PEM, "server.pem": srvCert, "server.key": srvKey, "client.pem": cliCert, "client.key": cliKey}
	for name, data := range files {
		writeBytes(t, filepath.Join(dir, name), data)
	}
	s := startShop(t,
		"--grpc-tls-cert", filepath.Join(dir, "server.pem"),
		"--grpc-tls-key", filepath.Join(dir, "server.key"),
		"--grpc-tls-client-ca", filepath.Join(dir, "ca.pem"),
	)
	req := &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{desc("client", "tls")}}

	other := newCA(t, "other-ca")
	otherCert, otherKey := issue(t, other, 300, false)
	plain, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	refused := []struct {
		name   string
		client pb.RateLimitServiceClient
	}{
		{"no client certificate", tlsClient(t, s.GRPCAddr, ca, nil)},
		{"certificate from another CA", tlsClient(t, s.GRPCAddr, ca, keyPair(t, otherCert, otherKey))},
		{"plaintext", pb.NewRateLimitServiceClient(plain)},
	}
	for _, r := range refused {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		resp, err := r.client.ShouldRateLimit(ctx, req)
		cancel()
		if err == nil {
			t.Errorf("%s: served (%v), want refused", r.name, resp)
		}
	}

	good := tlsClient(t, s.GRPCAddr, ca, keyPair(t, cliCert, cliKey))
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	resp, err := good.ShouldRateLimit(ctx, req)
	if err != nil || resp.GetOverallCode() != pb.RateLimitResponse_OK {
		t.Fatalf("valid client certificate: %v, %v; want OK", resp, err)
	}

	out, errOut, code := runCLI(t, nil, "check", "--addr", s.GRPCAddr, "--domain", "shop", "-d", "client=tls-cli",
		"--tls-ca", filepath.Join(dir, "ca.pem"), "--tls-cert", filepath.Join(dir, "client.pem"), "--tls-key", filepath.Join(dir, "client.key"))
	if code != 0 || !strings.Contains(out, "overall: OK") {
		t.Errorf("envoy-rls check over mTLS: exit %d, stdout %q, stderr %q; want 0 and overall: OK", code, out, errOut)
	}
	_, errOut, code = runCLI(t, nil, "check", "--addr", s.GRPCAddr, "--domain", "shop", "-d", "client=tls-cli", "--tls-ca", filepath.Join(dir, "ca.pem"))
	if code != 2 {
		t.Errorf("envoy-rls check over TLS without a client certificate: exit %d (stderr %q), want 2", code, errOut)
	}

	// Rotate: a new server certificate (serial 101) replaces the files.
	newCert, newKey := issue(t, ca, 101, true)
	writeBytes(t, filepath.Join(dir, "server.key"), newKey)
	writeBytes(t, filepath.Join(dir, "server.pem"), newCert)
	client := keyPair(t, cliCert, cliKey)
	eventually.True(t, "rotated server certificate served", func() (bool, string) {
		serial, err := peerSerial(s.GRPCAddr, ca, client)
		if err != nil {
			return false, err.Error()
		}
		return serial == 101, fmt.Sprintf("serial %d", serial)
	})
	// And a fresh connection is served with it.
	resp, err = tlsClient(t, s.GRPCAddr, ca, client).ShouldRateLimit(ctx, req)
	if err != nil || resp.GetOverallCode() != pb.RateLimitResponse_OK {
		t.Fatalf("after rotation: %v, %v; want OK", resp, err)
	}
	s.stop()
}

// peerSerial makes one TLS handshake and returns the server leaf's serial.
func peerSerial(addr string, ca *testcert.CA, client *tls.Certificate) (int64, error) {
	cfg := &tls.Config{RootCAs: x509.NewCertPool(), Certificates: []tls.Certificate{*client}, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12}
	cfg.RootCAs.AddCert(ca.Cert)
	d := &net.Dialer{Timeout: callTimeout}
	conn, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64(), nil
}

// Package clients holds the bodies of envoy-rls's client commands: check
// asks the gRPC port for a decision, explain, override and top call a
// running server's debug/admin listener (one dial/TLS helper, dial.go,
// serves them all), and validate, explain (offline) and inspect read the
// rules and Redis as serve's settings (internal/serveconfig) say. Each
// command is a type whose fields are its flags, with a Run that returns
// the exit code; the command tree, help and argument checks are
// internal/cli's. It serves nothing and must not import internal/app or
// internal/cli.
package clients

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	flag "github.com/spf13/pflag"

	"github.com/envoy-rls/envoy-rls/pkg/tlsfiles"
)

// TLSFiles name the PEM files of a client's --tls-ca, --tls-cert and
// --tls-key: every client command takes these three, for the gRPC port
// (check) or the debug/admin listener (explain, override, top).
type TLSFiles struct {
	CA, Cert, Key string
}

// register defines --tls-ca, --tls-cert and --tls-key with the help of
// the command that takes them.
func (t *TLSFiles) register(fs *flag.FlagSet, ca, cert, key string) {
	fs.StringVar(&t.CA, "tls-ca", "", ca)
	fs.StringVar(&t.Cert, "tls-cert", "", cert)
	fs.StringVar(&t.Key, "tls-key", "", key)
}

// grpcCredentials are the transport credentials of a gRPC client with
// the files t: plain text without a CA.
func grpcCredentials(t TLSFiles) (credentials.TransportCredentials, error) {
	cfg, err := clientTLS(t)
	if err != nil || cfg == nil {
		return insecure.NewCredentials(), err
	}
	return credentials.NewTLS(cfg), nil
}

// clientTLS is the client side of the --tls-ca, --tls-cert and --tls-key
// flags of every client command: nil (plain text) without a CA, else a
// configuration trusting it and, with a certificate, presenting it (mTLS).
func clientTLS(t TLSFiles) (*tls.Config, error) {
	if t.CA == "" {
		if t.Cert != "" || t.Key != "" {
			return nil, errors.New("--tls-cert/--tls-key need --tls-ca")
		}
		return nil, nil
	}
	cfg, err := tlsfiles.Config(tlsfiles.Files{CA: t.CA, Cert: t.Cert, Key: t.Key})
	if err != nil {
		return nil, fmt.Errorf("--tls-ca/--tls-cert/--tls-key: %w", err)
	}
	return cfg, nil
}

// debugClient is the client of a server's debug/admin listener at addr:
// its base URL, and an HTTP client that speaks TLS when t names a CA
// (mTLS with a certificate and key), as the listener does with
// --admin-tls-cert; nil means http.DefaultClient's plain HTTP.
func debugClient(addr string, t TLSFiles) (string, *http.Client, error) {
	tlsCfg, err := clientTLS(t)
	if err != nil || tlsCfg == nil {
		return "http://" + addr, nil, err
	}
	// The server offers only h2 (pkg/certreload), so the client must too.
	return "https://" + addr, &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg, ForceAttemptHTTP2: true}}, nil
}

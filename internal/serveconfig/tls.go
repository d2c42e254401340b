package serveconfig

import (
	"fmt"

	flag "github.com/spf13/pflag"

	"github.com/envoy-rls/envoy-rls/internal/app"
)

// tlsFlags configure gRPC server TLS.
type tlsFlags struct {
	cert, key, clientCA string
}

func (t *tlsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.cert, "grpc-tls-cert", "", "PEM certificate for gRPC TLS; re-read when the file changes")
	fs.StringVar(&t.key, "grpc-tls-key", "", "PEM private key for gRPC TLS")
	fs.StringVar(&t.clientCA, "grpc-tls-client-ca", "", "PEM CA bundle; when set, clients must present a certificate it signed (mTLS)")
}

// files are the gRPC server's TLS files; zero when TLS is off.
func (t *tlsFlags) files() (app.TLSFiles, error) {
	return serverTLSFiles("--grpc-tls", t.cert, t.key, t.clientCA)
}

// serverTLSFiles checks a server's TLS flags, named by their common
// prefix: a client CA needs a certificate and key; TLS is on when either
// of those is given (the files are read when the server is built, and a
// missing one is named then).
func serverTLSFiles(flag, cert, key, clientCA string) (app.TLSFiles, error) {
	if cert == "" && key == "" {
		if clientCA != "" {
			return app.TLSFiles{}, fmt.Errorf("%s-client-ca needs %s-cert and %s-key", flag, flag, flag)
		}
		return app.TLSFiles{}, nil
	}
	return app.TLSFiles{Cert: cert, Key: key, ClientCA: clientCA}, nil
}

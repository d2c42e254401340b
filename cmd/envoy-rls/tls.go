package main

import (
	"errors"
	"flag"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/envoy-rls/envoy-rls/pkg/certreload"
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

// serverOption returns nil when TLS is off.
func (t *tlsFlags) serverOption(log *zap.Logger) (grpc.ServerOption, error) {
	if t.cert == "" && t.key == "" {
		if t.clientCA != "" {
			return nil, errors.New("--grpc-tls-client-ca needs --grpc-tls-cert and --grpc-tls-key")
		}
		return nil, nil
	}
	srv, err := certreload.NewServer(t.cert, t.key, t.clientCA)
	if err != nil {
		return nil, err
	}
	log.Info("gRPC TLS enabled", zap.Bool("mtls", t.clientCA != ""))
	return grpc.Creds(credentials.NewTLS(srv.Config())), nil
}

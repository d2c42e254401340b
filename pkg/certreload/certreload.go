// Package certreload builds server TLS configurations whose certificate,
// key and client-CA files are read again when they change on disk, so that
// rotated certificates (cert-manager, Kubernetes secret updates) take effect
// without a restart. It only reads files; it never writes or generates them.
package certreload

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// checkEvery bounds how often a handshake may stat the files.
const checkEvery = time.Second

// Server hands out the current TLS configuration for each handshake.
type Server struct {
	certFile, keyFile, caFile string

	// now is the clock that paces the file checks; tests replace it.
	now func() time.Time

	mu        sync.Mutex
	current   *tls.Config
	stamp     string
	lastCheck time.Time
	lastErr   error
}

// NewServer loads the files once and fails if they are unusable. With a
// clientCAFile, clients must present a certificate signed by it (mTLS).
func NewServer(certFile, keyFile, clientCAFile string) (*Server, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("certreload: both a certificate and a key file are required")
	}
	s := &Server{certFile: certFile, keyFile: keyFile, caFile: clientCAFile, now: time.Now}
	stamp, err := s.stampFiles()
	if err != nil {
		return nil, err
	}
	cfg, err := s.load()
	if err != nil {
		return nil, err
	}
	s.current, s.stamp, s.lastCheck = cfg, stamp, s.now()
	return s, nil
}

// Config returns a tls.Config that resolves to the newest loaded files on
// every handshake.
func (s *Server) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.get(), nil
		},
	}
}

func (s *Server) get() *tls.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if now.Sub(s.lastCheck) < checkEvery {
		return s.current
	}
	s.lastCheck = now
	stamp, err := s.stampFiles()
	if err != nil || stamp == s.stamp {
		if err != nil {
			s.lastErr = err
		}
		return s.current
	}
	cfg, err := s.load()
	if err != nil {
		// A half-written rotation must not break serving: keep the old pair.
		s.lastErr = err
		return s.current
	}
	s.current, s.stamp, s.lastErr = cfg, stamp, nil
	return s.current
}

// stampFiles summarises the files' sizes and modification times.
func (s *Server) stampFiles() (string, error) {
	stamp := ""
	for _, f := range []string{s.certFile, s.keyFile, s.caFile} {
		if f == "" {
			continue
		}
		fi, err := os.Stat(f)
		if err != nil {
			return "", fmt.Errorf("certreload: %w", err)
		}
		stamp += fmt.Sprintf("%s:%d:%d;", f, fi.Size(), fi.ModTime().UnixNano())
	}
	return stamp, nil
}

func (s *Server) load() (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(s.certFile, s.keyFile)
	if err != nil {
		return nil, fmt.Errorf("certreload: load %s and %s: %w", s.certFile, s.keyFile, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}}
	if s.caFile != "" {
		pem, err := os.ReadFile(s.caFile)
		if err != nil {
			return nil, fmt.Errorf("certreload: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("certreload: %s holds no PEM certificate", s.caFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

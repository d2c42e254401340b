package redistest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { Main(m) }

func TestStandalone(t *testing.T) {
	ctx := context.Background()
	s := Standalone(t)
	c := s.Client(t)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	sha, err := c.ScriptLoad(ctx, "return 1").Result()
	if err != nil {
		t.Fatalf("SCRIPT LOAD: %v", err)
	}

	s.Restart(t)
	// The restart drops data and scripts, as the NOSCRIPT tests rely on.
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("GET after restart: err = %v, want redis.Nil", err)
	}
	if err := c.EvalSha(ctx, sha, nil).Err(); err == nil || !redis.HasErrorPrefix(err, "NOSCRIPT") {
		t.Errorf("EVALSHA after restart: err = %v, want NOSCRIPT", err)
	}

	s.Kill(t)
	if s.Running() {
		t.Error("Running after Kill = true")
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Error("PING after Kill succeeded")
	}
	s.Start(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Errorf("PING after Start: %v", err)
	}
}

func TestSharedStandalone(t *testing.T) {
	a, b := SharedStandalone(t), SharedStandalone(t)
	if a != b {
		t.Fatalf("SharedStandalone returned two servers: %s and %s", a.Addr, b.Addr)
	}
	if err := a.Client(t).Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if p, q := KeyPrefix(t), KeyPrefix(t); p == q {
		t.Errorf("KeyPrefix repeated %q", p)
	}
}

func TestStandaloneTLS(t *testing.T) {
	s := StandaloneTLS(t)
	f := s.TLSFiles()
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(f.CAFile)
	if err != nil || !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("CA %s: %v", f.CAFile, err)
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.TLSAddr, TLSConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}})
	defer c.Close()
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING over TLS: %v", err)
	}
}

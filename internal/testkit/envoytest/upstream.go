package envoytest

import (
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// Upstream is a real HTTP server on loopback for an Envoy to route to: it
// answers 200 "ok" and records every request that reached it, so a test
// counts what Envoy let through.
type Upstream struct {
	// Addr is its host:port on 127.0.0.1.
	Addr string

	mu   sync.Mutex
	hits []Hit
}

// Hit is one request the upstream served.
type Hit struct {
	At     time.Time
	Path   string
	Header http.Header
}

// StartUpstream starts an Upstream, closed at cleanup.
func StartUpstream(t TB) *Upstream {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("envoytest: upstream: %v", err)
	}
	u := &Upstream{Addr: l.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.hits = append(u.hits, Hit{At: time.Now(), Path: r.URL.Path, Header: r.Header.Clone()})
		u.mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return u
}

// Hits returns a copy of the requests served so far.
func (u *Upstream) Hits() []Hit {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]Hit(nil), u.hits...)
}

// Between counts the requests that reached the upstream in [from, to).
func (u *Upstream) Between(from, to time.Time) int {
	n := 0
	for _, h := range u.Hits() {
		if !h.At.Before(from) && h.At.Before(to) {
			n++
		}
	}
	return n
}

// Package admin serves envoy-rls's operational HTTP endpoints: liveness,
// readiness, Prometheus metrics, the loaded rules, and optionally pprof. It
// mounts handlers it is given (such as the /json twin of the gRPC API) but
// knows nothing of rate limiting itself, and must not import backends.
package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"
)

// Options lists what the admin mux serves. Nil fields are left out.
type Options struct {
	// Ready reports why the service cannot take traffic, or nil when it can.
	Ready func(ctx context.Context) error
	// Metrics serves /metrics.
	Metrics http.Handler
	// JSON serves /json.
	JSON http.Handler
	// Config returns the loaded rules for /debug/config, as JSON-marshalable data.
	Config func() any
	// Pprof mounts /debug/pprof/.
	Pprof bool
	// ReadyTimeout bounds one readiness probe; 0 means one second.
	ReadyTimeout time.Duration
}

// Server is the admin HTTP handler plus the draining switch that makes
// /readyz fail during shutdown.
type Server struct {
	opts     Options
	draining atomic.Bool
	mux      *http.ServeMux
}

// New returns the admin handler for opts.
func New(opts Options) *Server {
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = time.Second
	}
	s := &Server{opts: opts, mux: http.NewServeMux()}
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { text(w, http.StatusOK, "ok") })
	s.mux.HandleFunc("GET /readyz", s.readyz)
	if opts.Metrics != nil {
		s.mux.Handle("GET /metrics", opts.Metrics)
	}
	if opts.JSON != nil {
		s.mux.Handle("/json", opts.JSON)
	}
	if opts.Config != nil {
		s.mux.HandleFunc("GET /debug/config", s.debugConfig)
	}
	if opts.Pprof {
		s.mux.HandleFunc("/debug/pprof/", pprof.Index)
		s.mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		s.mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		s.mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		s.mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Drain makes /readyz fail from now on, so load balancers stop sending
// traffic before the servers stop.
func (s *Server) Drain() { s.draining.Store(true) }

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		text(w, http.StatusServiceUnavailable, "not ready: shutting down")
		return
	}
	if s.opts.Ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), s.opts.ReadyTimeout)
		defer cancel()
		if err := s.opts.Ready(ctx); err != nil {
			text(w, http.StatusServiceUnavailable, fmt.Sprintf("not ready: %v", err))
			return
		}
	}
	text(w, http.StatusOK, "ready")
}

func (s *Server) debugConfig(w http.ResponseWriter, _ *http.Request) {
	b, err := json.MarshalIndent(s.opts.Config(), "", "  ")
	if err != nil {
		text(w, http.StatusInternalServerError, fmt.Sprintf("admin: encode config: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
}

func text(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = fmt.Fprintln(w, msg)
}

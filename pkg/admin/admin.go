// Package admin serves envoy-rls's operational HTTP endpoints on two
// handlers. The service handler is for the cluster: liveness, readiness,
// Prometheus metrics, and handlers it is given (such as the /json twin of
// the gRPC API). The debug handler is for an operator on the debug
// listener, loopback by default: the loaded rules, the live explain and
// the token-protected admin API it is given (overrides), and optionally
// pprof. It knows nothing of rate limiting itself, must not import
// backends, and must not mount debug endpoints on the service handler.
package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
)

// Options lists what the service handler serves. Nil fields are left out.
type Options struct {
	// Ready reports why the service cannot take traffic, or nil when it
	// can; it serves /readyz and /healthcheck. It bounds its own duration.
	Ready func(ctx context.Context) error
	// Metrics serves /metrics.
	Metrics http.Handler
	// JSON serves /json.
	JSON http.Handler
}

// New returns the service handler for opts: /healthz, /readyz,
// /healthcheck (envoyproxy/ratelimit's name for readiness), /metrics and
// /json.
func New(opts Options) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { text(w, http.StatusOK, "ok") })
	ready := readyHandler(opts.Ready)
	mux.HandleFunc("GET /readyz", ready)
	mux.HandleFunc("GET /healthcheck", ready)
	if opts.Metrics != nil {
		mux.Handle("GET /metrics", opts.Metrics)
	}
	if opts.JSON != nil {
		mux.Handle("/json", opts.JSON)
	}
	return mux
}

// DebugOptions lists what the debug handler serves. Nil fields are left out.
type DebugOptions struct {
	// Config returns the loaded rules for /debug/config, as JSON-marshalable data.
	Config func() any
	// RLConfig writes the loaded rules for /rlconfig, in
	// envoyproxy/ratelimit's text form.
	RLConfig func(w io.Writer) error
	// Pprof mounts /debug/pprof/.
	Pprof bool
	// Explain serves POST /debug/explain, which explains a request
	// against the running rules and counters and changes nothing.
	Explain http.Handler
	// Admin serves the admin API under /admin/ (runtime overrides), behind
	// a bearer token read from AdminTokenFile on every request, so a
	// rotated file takes effect without a restart. With no AdminTokenFile
	// every /admin/ request, read or write, gets 403 saying how to enable
	// it: the API changes limits, and its list shows operators' reasons.
	Admin          http.Handler
	AdminTokenFile string
	// Console serves the live console (/console/) and its JSON
	// (/debug/top); pkg/console builds it.
	Console http.Handler
}

// NewDebug returns the debug handler for opts: /debug/config, /rlconfig,
// /debug/explain, the console (/console/, /debug/top) and, with Pprof,
// /debug/pprof/. It belongs on a listener apart from the service
// handler's: a profile or the full rule set is not for every client that
// can reach /metrics.
func NewDebug(opts DebugOptions) http.Handler {
	mux := http.NewServeMux()
	if opts.Config != nil {
		mux.HandleFunc("GET /debug/config", func(w http.ResponseWriter, _ *http.Request) { debugConfig(w, opts.Config()) })
	}
	if opts.RLConfig != nil {
		mux.HandleFunc("GET /rlconfig", func(w http.ResponseWriter, _ *http.Request) { rlconfig(w, opts.RLConfig) })
	}
	if opts.Explain != nil {
		mux.Handle("POST /debug/explain", opts.Explain)
	}
	if opts.Admin != nil {
		mux.Handle("/admin/", RequireToken(opts.AdminTokenFile, opts.Admin))
	}
	if opts.Console != nil {
		mux.Handle("/console", opts.Console)
		mux.Handle("/console/", opts.Console)
		mux.Handle("GET /debug/top", opts.Console)
	}
	if opts.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

func readyHandler(ready func(context.Context) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if ready != nil {
			if err := ready(r.Context()); err != nil {
				text(w, http.StatusServiceUnavailable, fmt.Sprintf("not ready: %v", err))
				return
			}
		}
		text(w, http.StatusOK, "ready")
	}
}

func debugConfig(w http.ResponseWriter, cfg any) {
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		text(w, http.StatusInternalServerError, fmt.Sprintf("admin: encode config: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
}

// rlconfig renders into a buffer first, so that a failure is a 500 rather
// than a truncated 200.
func rlconfig(w http.ResponseWriter, write func(io.Writer) error) {
	var b bytes.Buffer
	if err := write(&b); err != nil {
		text(w, http.StatusInternalServerError, fmt.Sprintf("admin: render rlconfig: %v", err))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write(b.Bytes())
}

func text(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = fmt.Fprintln(w, msg)
}

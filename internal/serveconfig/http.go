package serveconfig

import (
	"errors"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/envoy-rls/envoy-rls/internal/app"
	"github.com/envoy-rls/envoy-rls/internal/flagenv"
)

// Defaults of the HTTP server limits; see register.
const (
	defaultHTTPReadTimeout    = 10 * time.Second
	defaultHTTPIdleTimeout    = 60 * time.Second
	defaultHTTPMaxHeaderBytes = 64 << 10
	defaultHTTPMaxConnections = 1024
)

// DefaultDebugAddr is --debug-addr's default, loopback: the clients of the
// debug listener (override, top) default to it.
const DefaultDebugAddr = "127.0.0.1:6070"

// httpFlags configure the two HTTP listeners: the service port (/healthz,
// /readyz, /metrics, /json), reached by the whole cluster, and the debug
// port.
//
// Each connection costs a goroutine and a file descriptor for as long as
// it is open, so a client must not be able to keep one open at will: the
// read timeout cuts off a request whose headers or body stall, the idle
// timeout closes kept-alive connections nobody uses, the header cap bounds
// what one request may make the server buffer, and the connection cap
// bounds what all of them together can hold.
type httpFlags struct {
	debugAddr      string
	readTimeout    time.Duration
	idleTimeout    time.Duration
	maxHeaderBytes int
	maxConnections int
}

func (h *httpFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&h.debugAddr, "debug-addr", DefaultDebugAddr, "debug listen address (/debug/config, /debug/explain, /debug/pprof with --pprof); loopback by default, empty turns it off")
	fs.DurationVar(&h.readTimeout, "http-read-timeout", defaultHTTPReadTimeout, "longest time to read one HTTP request, headers and body; a client that sends slower is cut off")
	fs.DurationVar(&h.idleTimeout, "http-idle-timeout", defaultHTTPIdleTimeout, "how long a kept-alive HTTP connection may wait for its next request")
	fs.IntVar(&h.maxHeaderBytes, "http-max-header-bytes", defaultHTTPMaxHeaderBytes, "largest HTTP request header block in bytes (larger gets 431)")
	fs.IntVar(&h.maxConnections, "http-max-connections", defaultHTTPMaxConnections, "most HTTP connections open at once on each HTTP listener; further ones wait to be accepted")
}

// validate checks the HTTP flags, naming the flag in each error.
func (h *httpFlags) validate() error {
	return errors.Join(
		flagenv.Positive("--http-read-timeout", h.readTimeout),
		flagenv.Positive("--http-idle-timeout", h.idleTimeout),
		flagenv.Positive("--http-max-header-bytes", h.maxHeaderBytes),
		flagenv.Positive("--http-max-connections", h.maxConnections),
	)
}

// limits are the HTTP servers' limits the flags set.
func (h *httpFlags) limits() app.HTTPLimits {
	return app.HTTPLimits{ReadTimeout: h.readTimeout, IdleTimeout: h.idleTimeout,
		MaxHeaderBytes: h.maxHeaderBytes, MaxConnections: h.maxConnections}
}

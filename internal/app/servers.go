package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"golang.org/x/net/netutil"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/envoy-rls/envoy-rls/pkg/admin"
	"github.com/envoy-rls/envoy-rls/pkg/certreload"
	"github.com/envoy-rls/envoy-rls/pkg/readiness"
	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// ServersConfig configures the listeners and the servers on them.
type ServersConfig struct {
	// GRPCAddr is host:port, or unix:///path for a Unix domain socket.
	GRPCAddr string
	// HTTPAddr serves /healthz, /readyz, /metrics and /json.
	HTTPAddr string
	// DebugAddr serves /debug/* and the admin API; empty turns it off.
	DebugAddr string
	// MetricsAddr, when set, serves the metrics at MetricsPath on a
	// listener of their own.
	MetricsAddr, MetricsPath string
	// GRPCOptions are the transport options (keepalive, connection age).
	GRPCOptions []grpc.ServerOption
	// GRPCTLS and DebugTLS, when their Cert or Key is set, serve TLS from files
	// re-read when they change.
	GRPCTLS, DebugTLS TLSFiles
	HTTP              HTTPLimits
	// Pprof mounts /debug/pprof on the debug listener.
	Pprof bool
	// AdminTokenFile holds the admin API's bearer token.
	AdminTokenFile string
	// ShutdownDelay is how long readiness fails before the drain;
	// ShutdownTimeout bounds the drain.
	ShutdownDelay, ShutdownTimeout time.Duration
}

// TLSFiles name a server's PEM files; ClientCA asks for client
// certificates (mTLS).
type TLSFiles struct{ Cert, Key, ClientCA string }

// HTTPLimits bound what HTTP clients can hold: each connection costs a
// goroutine and a file descriptor for as long as it is open.
type HTTPLimits struct {
	ReadTimeout, IdleTimeout       time.Duration
	MaxHeaderBytes, MaxConnections int
}

// unixScheme prefixes a GRPCAddr that names a Unix domain socket.
const unixScheme = "unix://"

// unixSocketMode lets the socket's group connect too: a sidecar Envoy runs
// as another user, and Kubernetes shares an emptyDir through the pod's
// fsGroup, so owner-only would lock it out and world access is not needed.
const unixSocketMode = 0o660

// handlers is what the servers serve, built by App.handlers.
type handlers struct {
	svc   *rls.Service
	rlqs  *rlqs.Server
	ready func(context.Context) error
	debug admin.DebugOptions
}

// servers are the gRPC, HTTP, debug and metrics servers, their listeners
// and the readiness they share.
type servers struct {
	cfg    ServersConfig
	grpc   *grpc.Server
	http   *http.Server
	debug  *http.Server
	health *health.Server
	ready  *readiness.Tracker
	log    *zap.Logger

	metrics        *http.Server // nil without MetricsAddr
	gl, hl, dl, ml net.Listener // dl, ml nil when off
}

// newServers builds the servers and opens their listeners (all or none).
func newServers(ctx context.Context, cfg ServersConfig, h handlers, reg *prometheus.Registry, log *zap.Logger) (*servers, error) {
	gopts := cfg.GRPCOptions
	if f := cfg.GRPCTLS; f.Cert != "" || f.Key != "" {
		srv, err := certreload.NewServer(cfg.GRPCTLS.Cert, cfg.GRPCTLS.Key, cfg.GRPCTLS.ClientCA)
		if err != nil {
			return nil, err
		}
		log.Info("gRPC TLS enabled", zap.Bool("mtls", cfg.GRPCTLS.ClientCA != ""))
		gopts = append(gopts[:len(gopts):len(gopts)], grpc.Creds(credentials.NewTLS(srv.Config())))
	}
	s := &servers{cfg: cfg, grpc: grpc.NewServer(gopts...), health: health.NewServer(), log: log}
	h.svc.Register(s.grpc)
	if h.rlqs != nil {
		h.rlqs.Register(s.grpc)
	}
	s.ready = newReadiness(ctx, h.ready, s.health, log)
	healthpb.RegisterHealthServer(s.grpc, healthService{Server: s.health, ready: s.ready})
	reflection.Register(s.grpc)
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
	s.http = s.httpServer(admin.New(admin.Options{Ready: s.ready.Check, Metrics: metrics, JSON: h.svc.JSONHandler()}))
	s.debug = s.httpServer(admin.NewDebug(h.debug))
	if cfg.MetricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle(cfg.MetricsPath, metrics)
		s.metrics = s.httpServer(mux)
	}
	return s, s.listen()
}

// httpServer returns an HTTP server for handler with the configured limits.
// There is no write timeout: responses are small and a pprof profile runs
// as long as it was asked to.
func (s *servers) httpServer(handler http.Handler) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: s.cfg.HTTP.ReadTimeout,
		ReadTimeout:       s.cfg.HTTP.ReadTimeout,
		IdleTimeout:       s.cfg.HTTP.IdleTimeout,
		MaxHeaderBytes:    s.cfg.HTTP.MaxHeaderBytes,
		// net/http's own complaints (accept errors, panics in handlers)
		// go to the JSON log, not to stderr as plain lines.
		ErrorLog: zap.NewStdLog(s.log.Named("http")),
	}
}

// listen opens the listeners; on error it closes those it opened.
func (s *servers) listen() error {
	var err error
	if s.gl, err = listenGRPC(s.cfg.GRPCAddr); err != nil {
		return err
	}
	if s.hl, err = s.listenHTTP("http-addr", s.cfg.HTTPAddr); err != nil {
		return err
	}
	if s.metrics != nil {
		if s.ml, err = s.listenHTTP("metrics-addr", s.cfg.MetricsAddr); err != nil {
			return err
		}
		s.log.Info("serving metrics", zap.String("metrics_addr", s.ml.Addr().String()), zap.String("path", s.cfg.MetricsPath))
	}
	if s.cfg.DebugAddr == "" {
		return nil
	}
	var debugTLS *tls.Config
	if f := s.cfg.DebugTLS; f.Cert != "" || f.Key != "" {
		srv, err := certreload.NewServer(f.Cert, f.Key, f.ClientCA)
		if err != nil {
			return fmt.Errorf("--admin-tls-*: %w", err)
		}
		s.log.Info("debug/admin listener TLS enabled", zap.Bool("mtls", f.ClientCA != ""))
		debugTLS = srv.Config()
	}
	if s.dl, err = s.listenHTTP("debug-addr", s.cfg.DebugAddr); err != nil {
		return err
	}
	if debugTLS != nil {
		s.dl = tls.NewListener(s.dl, debugTLS)
	}
	return nil
}

// closeListeners closes the listeners not handed to a server yet (Serve
// closes its own); closing one twice is harmless.
func (s *servers) closeListeners() {
	for _, l := range []net.Listener{s.gl, s.hl, s.dl, s.ml} {
		if l != nil {
			l.Close()
		}
	}
}

// listenHTTP opens addr for an HTTP server, accepting at most the
// configured number of connections at once: the next one waits in the
// kernel's backlog until one closes, which the timeouts make sure happens.
func (s *servers) listenHTTP(flagName, addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", flagName, err)
	}
	return netutil.LimitListener(l, s.cfg.HTTP.MaxConnections), nil
}

// run serves until ctx ends or a server fails, then shuts down (see
// shutdown); release ends the service's held requests.
func (s *servers) run(ctx context.Context, release func(), info ...zap.Field) error {
	g, gctx := errgroup.WithContext(ctx)
	serve := func(name string, srv interface{ Serve(net.Listener) error }, l net.Listener) {
		g.Go(func() error {
			err := srv.Serve(l)
			// A shutdown that comes before a Serve goroutine got to run
			// (a context cancelled at once) makes gRPC's Serve return
			// ErrServerStopped: that is the shutdown, not a failure.
			if err == nil || errors.Is(err, http.ErrServerClosed) || errors.Is(err, grpc.ErrServerStopped) {
				return nil
			}
			if name == "metrics" {
				// The extra metrics listener is not traffic: losing it
				// is logged, and the service keeps serving.
				s.log.Error("metrics server failed", zap.Error(err))
				return nil
			}
			return err
		})
	}
	serve("grpc", s.grpc, s.gl)
	serve("http", s.http, s.hl)
	debugAddr := "off"
	if s.dl != nil {
		debugAddr = s.dl.Addr().String()
		serve("debug", s.debug, s.dl)
	}
	if s.ml != nil {
		serve("metrics", s.metrics, s.ml)
	}
	s.log.Info("envoy-rls serving", append([]zap.Field{
		zap.String("grpc_addr", grpcAddrString(s.gl)),
		zap.String("http_addr", s.hl.Addr().String()),
		zap.String("debug_addr", debugAddr)}, info...)...)
	<-gctx.Done()
	failed := ctx.Err() == nil
	if failed {
		s.log.Error("server failed", zap.Error(context.Cause(gctx)))
	} else {
		s.log.Info("shutting down: draining")
	}
	s.shutdown(!failed, release)
	return g.Wait()
}

// shutdown fails readiness, waits ShutdownDelay (when delay) so load
// balancers notice, drains in-flight RPCs for at most ShutdownTimeout,
// then stops the HTTP servers.
func (s *servers) shutdown(delay bool, release func()) {
	s.ready.Drain()
	s.health.Shutdown()
	if s.cfg.ShutdownDelay > 0 && delay {
		time.Sleep(s.cfg.ShutdownDelay)
	}
	// Held requests (on_limit: delay) are answered now, not at their
	// reserved time, so the drain below does not wait for them.
	release()
	stopped := make(chan struct{})
	timer := time.NewTimer(s.cfg.ShutdownTimeout)
	defer timer.Stop()
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-timer.C:
		s.log.Warn("in-flight requests did not finish in time; closing them", zap.Duration("timeout", s.cfg.ShutdownTimeout))
		s.grpc.Stop()
		<-stopped
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	_ = s.http.Shutdown(sctx)
	if s.metrics != nil {
		_ = s.metrics.Shutdown(sctx)
	}
	// Debug requests are not traffic to drain; a profile may run for long.
	_ = s.debug.Close()
	s.log.Info("envoy-rls stopped")
}

// newReadiness returns the one readiness answer for /readyz, /healthcheck
// and gRPC health (the server, the rate-limit service and "ratelimit"):
// not draining, and check (the rule source's first config, then the
// backend stack's Ready) passing. It publishes every flip to the gRPC
// health server, so watchers follow too, and logs it.
func newReadiness(ctx context.Context, check func(context.Context) error, hs *health.Server, log *zap.Logger) *readiness.Tracker {
	return readiness.New(ctx, readiness.Options{
		Check: check,
		OnChange: func(err error) {
			st := healthpb.HealthCheckResponse_SERVING
			switch {
			case errors.Is(err, readiness.ErrDraining):
				st = healthpb.HealthCheckResponse_NOT_SERVING
				log.Info("not ready", zap.Error(err))
			case err != nil:
				st = healthpb.HealthCheckResponse_NOT_SERVING
				log.Warn("not ready", zap.Error(err))
			default:
				log.Info("ready")
			}
			hs.SetServingStatus("", st)
			hs.SetServingStatus(pb.RateLimitService_ServiceDesc.ServiceName, st)
			// The name envoyproxy/ratelimit registers, which its users'
			// probes (grpc_health_probe -service=ratelimit) ask for.
			hs.SetServingStatus(refHealthName, st)
		},
	})
}

// refHealthName is the gRPC health service name envoyproxy/ratelimit
// registers (its binary's name).
const refHealthName = "ratelimit"

// healthService is the gRPC health service. Check evaluates readiness as
// /readyz does, so both answer alike at any moment; Watch and List follow
// the statuses readiness publishes (on each evaluation, at least every
// readiness.DefaultInterval).
type healthService struct {
	*health.Server
	ready *readiness.Tracker
}

// Check re-evaluates readiness, which publishes any flip to the embedded
// server before it answers.
func (h healthService) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	_ = h.ready.Check(ctx)
	return h.Server.Check(ctx, req)
}

// listenGRPC opens the gRPC listener: TCP for host:port, a Unix domain
// socket for unix:///path.
func listenGRPC(addr string) (net.Listener, error) {
	path, ok := strings.CutPrefix(addr, unixScheme)
	if !ok {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("--grpc-addr: %w", err)
		}
		return l, nil
	}
	if path == "" {
		return nil, fmt.Errorf("--grpc-addr: %q names no socket path (want unix:///path/to/socket)", addr)
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, fmt.Errorf("--grpc-addr: %w", err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("--grpc-addr: %w", err)
	}
	if err := os.Chmod(path, unixSocketMode); err != nil {
		l.Close()
		return nil, fmt.Errorf("--grpc-addr: %w", err)
	}
	return l, nil
}

// removeStaleSocket deletes a socket left by a process that died without
// closing it, which would make the listen fail with "address in use". A
// socket some process still accepts on is kept (two servers on one socket
// is an error to report), and so is any file that is not a socket.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("%s: another process is listening on it", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove stale socket: %w", err)
	}
	return nil
}

// grpcAddrString is the listener's address as a client would dial it.
func grpcAddrString(l net.Listener) string {
	if l.Addr().Network() == "unix" {
		return unixScheme + l.Addr().String()
	}
	return l.Addr().String()
}

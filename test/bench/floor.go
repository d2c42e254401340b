package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os/signal"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/reflection"
)

// floorServer answers every ShouldRateLimit with OK and does nothing else:
// what any Go gRPC rate-limit service must spend at least per call. With
// a Redis client (--redis-addr) it first sends one INCR of the first
// descriptor entry's value, with go-redis's default options and nothing
// else: what any Go gRPC service must spend at least per decision that
// takes one Redis round trip (the wake-up measurement's second floor).
type floorServer struct {
	rlsv3.UnimplementedRateLimitServiceServer
	redis *redis.Client
}

func (f floorServer) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if f.redis != nil {
		key := "floor"
		if ds := req.GetDescriptors(); len(ds) > 0 && len(ds[0].GetEntries()) > 0 {
			key = "floor:" + ds[0].GetEntries()[0].GetValue()
		}
		if err := f.redis.Incr(ctx, key).Err(); err != nil {
			return nil, err
		}
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
}

// floorMain runs the floor: the same default grpc.Server as envoy-rls (with
// reflection), and /readyz on HTTP so the driver waits for it the same way
// (any path answers, so that the HTTP listener is also an upstream).
// It stops on SIGTERM or SIGINT.
func floorMain(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench --floor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	grpcAddr := fs.String("grpc-addr", "127.0.0.1:0", "gRPC listen address")
	httpAddr := fs.String("http-addr", "127.0.0.1:0", "HTTP listen address (/readyz)")
	redisAddr := fs.String("redis-addr", "", "when set, one INCR on this Redis per call")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	srv := floorServer{}
	if *redisAddr != "" {
		srv.redis = redis.NewClient(&redis.Options{Addr: *redisAddr})
		defer srv.redis.Close()
	}
	if err := serveFloor(ctx, srv, *grpcAddr, *httpAddr); err != nil {
		fmt.Fprintf(stderr, "bench floor: %v\n", err)
		return 1
	}
	return 0
}

func serveFloor(ctx context.Context, srv floorServer, grpcAddr, httpAddr string) error {
	gl, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		return fmt.Errorf("bench: floor: %w", err)
	}
	hl, err := net.Listen("tcp", httpAddr)
	if err != nil {
		gl.Close()
		return fmt.Errorf("bench: floor: %w", err)
	}
	gsrv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(gsrv, srv)
	reflection.Register(gsrv)
	mux := http.NewServeMux()
	// Every path answers 200 "ok": /readyz for the driver, and the rest
	// because the phase through Envoy uses this listener as its upstream, a
	// Go server whose work per request is the same in every configuration.
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	// The wake-up measurement (--wakeups) takes its execution trace here,
	// as it does from the services' debug listeners.
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	// A CPU profile, to set beside envoy-rls's when asking where a
	// decision's CPU above the floor goes.
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	hsrv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	errs := make(chan error, 2)
	go func() { errs <- gsrv.Serve(gl) }()
	go func() { errs <- hsrv.Serve(hl) }()
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errs:
	}
	stopped := make(chan struct{})
	go func() { gsrv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		gsrv.Stop()
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hsrv.Shutdown(sctx)
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) && !errors.Is(serveErr, grpc.ErrServerStopped) {
		return fmt.Errorf("bench: floor: %w", serveErr)
	}
	return nil
}

package serveconfig

import (
	"errors"
	"runtime"
	"time"

	flag "github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/envoy-rls/envoy-rls/internal/flagenv"
)

// grpcFlags are the gRPC transport flags: connection age and keepalive.
type grpcFlags struct {
	maxConnAge          time.Duration
	maxConnAgeGrace     time.Duration
	keepaliveTime       time.Duration
	keepaliveTimeout    time.Duration
	keepaliveMinTime    time.Duration
	keepalivePermitIdle bool
}

func (g *grpcFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&g.maxConnAge, "grpc-max-connection-age", 24*time.Hour, "close each gRPC connection (GOAWAY, ±10% jitter) after this long, so clients such as Envoy reconnect and spread over new replicas after a scale-up; 0: never")
	fs.DurationVar(&g.maxConnAgeGrace, "grpc-max-connection-age-grace", time.Hour, "after --grpc-max-connection-age, how long in-flight RPCs may finish before the connection is cut; 0: no limit")
	fs.DurationVar(&g.keepaliveTime, "grpc-keepalive-time", 2*time.Hour, "ping a gRPC client after its connection was quiet this long, to find dead peers")
	fs.DurationVar(&g.keepaliveTimeout, "grpc-keepalive-timeout", 20*time.Second, "close a gRPC connection whose keepalive ping is not answered within this")
	fs.DurationVar(&g.keepaliveMinTime, "grpc-keepalive-min-time", 10*time.Second, "shortest ping interval a gRPC client may use; a client pinging more often is disconnected (too_many_pings)")
	fs.BoolVar(&g.keepalivePermitIdle, "grpc-keepalive-permit-without-stream", true, "allow client pings on a connection with no RPC in flight (Envoy keeps idle connections alive this way)")
}

// validate checks the transport flags, naming the flag in each error.
func (g *grpcFlags) validate() error {
	var errs []error
	for _, d := range []struct {
		flag string
		v    time.Duration
		zero bool // 0 is allowed and means "off"
	}{
		{"--grpc-max-connection-age", g.maxConnAge, true},
		{"--grpc-max-connection-age-grace", g.maxConnAgeGrace, true},
		{"--grpc-keepalive-time", g.keepaliveTime, false},
		{"--grpc-keepalive-timeout", g.keepaliveTimeout, false},
		{"--grpc-keepalive-min-time", g.keepaliveMinTime, false}, // grpc-go reads 0 as 5m
	} {
		if d.v < 0 || (d.v == 0 && !d.zero) {
			errs = append(errs, flagenv.Positive(d.flag, d.v))
		}
	}
	return errors.Join(errs...)
}

// streamWorkers is how many goroutines serve gRPC streams: enough for the
// concurrent requests of a busy replica (64 per CPU, at most 1024).
func streamWorkers() uint32 { return uint32(min(64*runtime.GOMAXPROCS(0), 1024)) }

// serverOptions turns the flags into gRPC server options. A zero age or
// grace is left out: grpc-go reads an unset field as "infinite".
func (g *grpcFlags) serverOptions() []grpc.ServerOption {
	sp := keepalive.ServerParameters{Time: g.keepaliveTime, Timeout: g.keepaliveTimeout}
	if g.maxConnAge > 0 {
		sp.MaxConnectionAge = g.maxConnAge
	}
	if g.maxConnAgeGrace > 0 {
		sp.MaxConnectionAgeGrace = g.maxConnAgeGrace
	}
	return []grpc.ServerOption{
		// Reused stream goroutines keep the stack a request grows: a new
		// goroutine per stream grew and copied its stack on every
		// request, 10-12% of the service's CPU at 1000 requests/s and at
		// 32 concurrent callers (BENCHMARKS.md, issue 19). grpc-go starts
		// a goroutine when every worker is busy; an idle worker costs
		// only its stack.
		grpc.NumStreamWorkers(streamWorkers()),
		grpc.KeepaliveParams(sp),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             g.keepaliveMinTime,
			PermitWithoutStream: g.keepalivePermitIdle,
		}),
	}
}

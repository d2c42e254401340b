package refstats

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/envoy-rls/envoy-rls/internal/testkit/eventually"
	"github.com/envoy-rls/envoy-rls/internal/testkit/statsdtest"
)

// source is a table of cumulative counters, as rls.ReferenceMetrics
// yields them.
type source struct {
	mu sync.Mutex
	v  map[[2]string]uint64
}

func (s *source) set(scope, name string, v uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.v == nil {
		s.v = map[[2]string]uint64{}
	}
	s.v[[2]string{scope, name}] = v
}

func (s *source) Stats(f func(scope, name string, v uint64)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range s.v {
		f(k[0], k[1], v)
	}
}

func newSender(t *testing.T, e *statsdtest.Exporter, protocol string, tags map[string]string, src *source) *Sender {
	t.Helper()
	s, err := New(Options{Host: "127.0.0.1", Port: e.StatsdPort, Protocol: protocol, Tags: tags, FlushInterval: time.Hour, Source: src},
		"ratelimit_server", "ShouldRateLimit.response_time")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// awaitValue polls the exporter until name{labels} is want.
func awaitValue(t *testing.T, e *statsdtest.Exporter, s *Sender, name string, labels map[string]string, want float64) {
	t.Helper()
	eventually.True(t, name, func() (bool, string) {
		s.Flush() // sends only growth: repeating it must not double count
		got, ok := e.Value(t, name, labels)
		return ok && got == want, e.Names(t)
	})
}

// TestEnvoyGatewayMapping: the stats reach a real statsd_exporter with
// Envoy Gateway's mapping as the Prometheus series its dashboards read,
// over TCP (the reference's transport) and UDP.
func TestEnvoyGatewayMapping(t *testing.T) {
	for _, protocol := range []string{"tcp", "udp"} {
		t.Run(protocol, func(t *testing.T) {
			e := statsdtest.Start(t, statsdtest.EnvoyGatewayMapping())
			src := &source{}
			s := newSender(t, e, protocol, nil, src)
			src.set("ratelimit", "service.rate_limit.first-listener.first-route_first-route.rule-0-match-0_rule-0-match-0.total_hits", 3)
			src.set("ratelimit", "service.rate_limit.first-listener.user.over_limit", 2)
			src.set("ratelimit", "service.call.should_rate_limit.redis_error", 1)
			src.set("ratelimit", "service.config_load_success", 1)
			src.set("ratelimit_server", "ShouldRateLimit.total_requests", 5)
			s.Observe(1500 * time.Microsecond)

			deep := map[string]string{"domain": "first-listener", "key1": "first-route_first-route", "key2": "rule-0-match-0_rule-0-match-0"}
			awaitValue(t, e, s, "ratelimit_service_rate_limit_total_hits", deep, 3)
			awaitValue(t, e, s, "ratelimit_service_rate_limit_over_limit", map[string]string{"domain": "first-listener", "key1": "user"}, 2)
			awaitValue(t, e, s, "ratelimit_service_should_rate_limit_error", map[string]string{"err_type": "redis_error"}, 1)
			awaitValue(t, e, s, "ratelimit_service_config_load_success", map[string]string{}, 1)
			awaitValue(t, e, s, "ratelimit_service_total_requests", map[string]string{"grpc_method": "ShouldRateLimit"}, 5)
			awaitValue(t, e, s, "ratelimit_service_response_time_seconds", map[string]string{"grpc_method": "ShouldRateLimit"}, 1)

			// Growth is sent, not the total again.
			src.set("ratelimit_server", "ShouldRateLimit.total_requests", 8)
			awaitValue(t, e, s, "ratelimit_service_total_requests", map[string]string{"grpc_method": "ShouldRateLimit"}, 8)
		})
	}
}

// TestExtraTags: EXTRA_TAGS go into the name after the scope's stat, as
// ".__key=value" sorted by key, the reference client's encoding (which
// the exporter, reading no such tags, keeps in the escaped name).
func TestExtraTags(t *testing.T) {
	e := statsdtest.Start(t, statsdtest.NoMapping())
	src := &source{}
	s := newSender(t, e, "tcp", map[string]string{"zone": "z1", "env": "prod"}, src)
	src.set("ratelimit", "service.config_load_error", 4)
	awaitValue(t, e, s, "ratelimit_service_config_load_error___env_prod___zone_z1", map[string]string{}, 4)
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Port: 1, Protocol: "tcp"}, "host"},
		{Options{Host: "h", Port: 0, Protocol: "tcp"}, "port"},
		{Options{Host: "h", Port: 1, Protocol: "quic"}, "protocol"},
		{Options{Host: "h", Port: 1, Protocol: "udp", FlushInterval: -time.Second}, "interval"},
		{Options{Host: "h", Port: 1, Protocol: "udp"}, "source"},
	} {
		if tc.want != "source" {
			tc.o.Source = &source{}
		}
		if _, err := New(tc.o, "s", "t"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one naming %s", tc.o, err, tc.want)
		}
	}
}

// BenchmarkObserve is the per-call cost of the timer line (the only
// statsd work on the request path); it must not allocate.
func BenchmarkObserve(b *testing.B) {
	s, err := New(Options{Host: "127.0.0.1", Port: 9, Protocol: "udp", FlushInterval: time.Hour, Source: &source{}}, "ratelimit_server", "ShouldRateLimit.response_time")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		s.Observe(1234 * time.Microsecond)
	}
}

func TestObserveAllocs(t *testing.T) {
	s, err := New(Options{Host: "127.0.0.1", Port: 9, Protocol: "udp", FlushInterval: time.Hour, Source: &source{}}, "ratelimit_server", "ShouldRateLimit.response_time")
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(1000, func() { s.Observe(1234 * time.Microsecond) }); n != 0 && !raceEnabled {
		t.Errorf("Observe allocates %v times per call, want 0", n)
	}
}

// TestRunEndsWithStatsdUnreachable: with the statsd server refusing
// connections, or accepting them and never reading, Run's last flush ends
// within its budget on Run's own goroutine, and no goroutine the Sender
// started outlives Run.
func TestRunEndsWithStatsdUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name     string
		protocol string
		addr     func(t *testing.T) (host string, port int)
	}{
		{"tcp refused", "tcp", func(t *testing.T) (string, int) { return "127.0.0.1", tcpPort(t, false) }},
		{"tcp never read", "tcp", func(t *testing.T) (string, int) { return "127.0.0.1", tcpPort(t, true) }},
		{"udp refused", "udp", func(t *testing.T) (string, int) {
			c, err := net.ListenPacket("udp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			a := c.LocalAddr().(*net.UDPAddr)
			_ = c.Close()
			return "127.0.0.1", a.Port
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ignore := goleak.IgnoreCurrent()
			host, port := tc.addr(t)
			src := &source{}
			s, err := New(Options{Host: host, Port: port, Protocol: tc.protocol, FlushInterval: time.Millisecond, Source: src},
				"ratelimit_server", "ShouldRateLimit.response_time")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			// Enough flushes and stats to fill what a socket would
			// hold without a reader.
			for i := range 20000 {
				src.set("ratelimit.service.rate_limit.d.k", "total_hits", uint64(i))
				s.Observe(time.Duration(i) * time.Microsecond)
			}
			s.Flush()
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
			case <-time.After(time.Minute): // a hang guard, not a timing bound
				t.Fatal("Run did not return after its context ended")
			}
			goleak.VerifyNone(t, ignore)
		})
	}
}

// tcpPort returns a loopback port whose listener, when listen, accepts
// connections and never reads them (until the test ends), else is closed,
// so that connections are refused.
func tcpPort(t *testing.T, listen bool) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if listen {
		t.Cleanup(func() { _ = l.Close() })
	} else {
		_ = l.Close()
	}
	return l.Addr().(*net.TCPAddr).Port
}

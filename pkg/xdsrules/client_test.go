package xdsrules_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/testkit/eventually"
	"github.com/envoy-rls/envoy-rls/internal/testkit/xdstest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
	"github.com/envoy-rls/envoy-rls/pkg/xdsrules"
)

const node = "rls-test"

// startClient runs a client against srv until the test ends.
func startClient(t *testing.T, srv *xdstest.Server, cfg xdsrules.Config) *xdsrules.Client {
	t.Helper()
	cfg.Server, cfg.NodeID = srv.Addr, node
	if cfg.Backoff == (xdsrules.Backoff{}) {
		// Short, so that a reconnect is quick; no test asserts on it.
		cfg.Backoff = xdsrules.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}
	}
	c, err := xdsrules.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return c
}

// limitOf returns the requests_per_unit the client's snapshot applies to
// key=value in domain, or -1 when nothing matches.
func limitOf(c *xdsrules.Client, domain, key, value string) int {
	r := c.Current().Match(domain, []algo.Entry{{Key: key, Value: value}})
	if r == nil || len(r.Limits) == 0 {
		return -1
	}
	return int(r.Limits[0].RequestsPerUnit)
}

func waitLimit(t *testing.T, c *xdsrules.Client, want int) {
	t.Helper()
	eventually.True(t, "limit applied", func() (bool, string) {
		got := limitOf(c, "api", "path", "/a")
		return got == want, "limit " + string(rune('0'+got))
	})
}

func TestClientAppliesACKsAndNACKs(t *testing.T) {
	srv := xdstest.Start(t, nil)
	srv.Set(node, "v1", xdstest.Config("api-rules", "api", xdstest.Limit("path", "/a", rlsconf.RateLimitUnit_MINUTE, 5)))
	var mu sync.Mutex
	var updates []error
	c := startClient(t, srv, xdsrules.Config{
		NodeMetadata: map[string]string{"zone": "z1"},
		Headers:      map[string]string{"x-token": "secret"},
		OnUpdate:     func(err error) { mu.Lock(); updates = append(updates, err); mu.Unlock() },
	})

	waitLimit(t, c, 5)
	if err := c.Ready(context.Background()); err != nil {
		t.Fatalf("ready after the first push: %v", err)
	}
	src, _ := c.Current().Source("api")
	if want := (rules.Source{Type: rules.SourceXDS, Name: "api-rules", Version: "v1"}); src != want {
		t.Errorf("source %+v, want %+v", src, want)
	}
	eventually.Holds(t, "v1 ACKed", func() bool {
		_, ok := srv.Find(func(r xdstest.Request) bool { return r.IsACK("v1") })
		return ok
	})
	first := srv.Requests()[0]
	if got := first.GetNode().GetMetadata().GetFields()["zone"].GetStringValue(); got != "z1" {
		t.Errorf("node metadata zone = %q, want z1", got)
	}
	if got := first.Metadata.Get("x-token"); len(got) != 1 || got[0] != "secret" {
		t.Errorf("x-token header = %v, want [secret]", got)
	}

	// A bad push: an unknown unit, and two resources for one domain.
	srv.Set(node, "v2",
		xdstest.Config("api-rules", "api", xdstest.Limit("path", "/a", rlsconf.RateLimitUnit_UNKNOWN, 7)),
		xdstest.Config("web-1", "web", xdstest.Limit("path", "/b", rlsconf.RateLimitUnit_SECOND, 1)),
		xdstest.Config("web-2", "web", xdstest.Limit("path", "/c", rlsconf.RateLimitUnit_SECOND, 1)))
	var nack xdstest.Request
	eventually.Holds(t, "v2 NACKed", func() bool {
		var ok bool
		nack, ok = srv.Find(func(r xdstest.Request) bool { return r.IsNACK() })
		return ok
	})
	msg := nack.GetErrorDetail().GetMessage()
	for _, want := range []string{"xds:api-rules", "descriptors[0].rate_limit.unit", `"unknown"`, "xds:web-2", `duplicate domain "web"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("NACK detail %q lacks %q", msg, want)
		}
	}
	if nack.GetVersionInfo() != "v1" {
		t.Errorf("NACK reports version %q, want the one in force, v1", nack.GetVersionInfo())
	}
	if got := limitOf(c, "api", "path", "/a"); got != 5 {
		t.Errorf("after the NACK the limit is %d, want the last good 5", got)
	}

	srv.Set(node, "v3", xdstest.Config("api-rules", "api", xdstest.Limit("path", "/a", rlsconf.RateLimitUnit_MINUTE, 9)))
	waitLimit(t, c, 9)

	mu.Lock()
	defer mu.Unlock()
	if len(updates) < 3 || updates[0] != nil || updates[1] == nil || updates[len(updates)-1] != nil {
		t.Errorf("OnUpdate saw %v, want nil, an error, ..., nil", updates)
	}
}

func TestClientReconnectsAndResyncs(t *testing.T) {
	srv := xdstest.Start(t, nil)
	srv.Set(node, "v1", xdstest.Config("api-rules", "api", xdstest.Limit("path", "/a", rlsconf.RateLimitUnit_MINUTE, 5)))
	c := startClient(t, srv, xdsrules.Config{})
	waitLimit(t, c, 5)
	// The ACK may reach the server after the rules apply: count the
	// requests once it has, so the next one recorded is the new stream's.
	eventually.Holds(t, "v1 ACKed", func() bool {
		_, ok := srv.Find(func(r xdstest.Request) bool { return r.IsACK("v1") })
		return ok
	})
	before := len(srv.Requests())

	srv.Restart()
	// The restarted server has no snapshot yet: the rules stay.
	eventually.Holds(t, "a new stream", func() bool { return len(srv.Requests()) > before })
	resub := srv.Requests()[before]
	if resub.GetResponseNonce() != "" || resub.GetVersionInfo() != "v1" {
		t.Errorf("resubscription %v, want no nonce and the version in force v1", resub.DiscoveryRequest)
	}
	if got := limitOf(c, "api", "path", "/a"); got != 5 {
		t.Errorf("while the server has no snapshot the limit is %d, want 5", got)
	}
	srv.Set(node, "v2", xdstest.Config("api-rules", "api", xdstest.Limit("path", "/a", rlsconf.RateLimitUnit_MINUTE, 8)))
	waitLimit(t, c, 8)
}

func TestClientReadiness(t *testing.T) {
	srv := xdstest.Start(t, nil) // no snapshot: nothing is pushed
	for _, tc := range []struct {
		name  string
		force bool
		ready bool
	}{
		{"waits for the first config", false, false},
		{"force start", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startClient(t, srv, xdsrules.Config{ForceStart: tc.force})
			err := c.Ready(context.Background())
			if (err == nil) != tc.ready {
				t.Fatalf("Ready = %v, want ready %v", err, tc.ready)
			}
			if n := len(c.Current().Domains()); n != 0 {
				t.Errorf("%d domains before any push", n)
			}
		})
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  xdsrules.Config
		want string
	}{
		{"no server", xdsrules.Config{NodeID: "n"}, "management server"},
		{"no node", xdsrules.Config{Server: "h:1"}, "node id"},
		{"backoff max below initial", xdsrules.Config{Server: "h:1", NodeID: "n", Backoff: xdsrules.Backoff{Initial: time.Second, Max: time.Millisecond}}, "max interval"},
		{"random factor", xdsrules.Config{Server: "h:1", NodeID: "n", Backoff: xdsrules.Backoff{Initial: time.Second, Max: time.Second, RandomFactor: 2}}, "random factor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := xdsrules.New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// TestClientReportsARefusedVersionOnce: go-control-plane's cache answers
// every NACK by sending the refused version again; each is NACKed again,
// but reported once.
func TestClientReportsARefusedVersionOnce(t *testing.T) {
	srv := xdstest.Start(t, nil)
	srv.Set(node, "bad", xdstest.Config("api-rules", "api", xdstest.Limit("path", "/a", rlsconf.RateLimitUnit_UNKNOWN, 7)))
	var mu sync.Mutex
	var updates []error
	startClient(t, srv, xdsrules.Config{OnUpdate: func(err error) { mu.Lock(); updates = append(updates, err); mu.Unlock() }})
	eventually.Holds(t, "three NACKs of the re-sent version", func() bool {
		n := 0
		for _, r := range srv.Requests() {
			if r.IsNACK() {
				n++
			}
		}
		return n >= 3
	})
	mu.Lock()
	defer mu.Unlock()
	if len(updates) != 1 || updates[0] == nil {
		t.Errorf("OnUpdate saw %v, want the refusal once", updates)
	}
}

// TestClientRefusesOversizedPushes: a push above MaxMsgSize never
// applies; the client stays without rules (and not ready).
func TestClientRefusesOversizedPushes(t *testing.T) {
	srv := xdstest.Start(t, nil)
	var descs []*rlsconf.RateLimitDescriptor
	for i := range 64 {
		descs = append(descs, xdstest.Limit("path", strings.Repeat("x", 32)+string(rune('a'+i%26))+strings.Repeat("y", i), rlsconf.RateLimitUnit_MINUTE, 5))
	}
	srv.Set(node, "big", xdstest.Config("api-rules", "api", descs...))
	c := startClient(t, srv, xdsrules.Config{MaxMsgSize: 1024})
	// Each attempt opens a stream whose push is refused by the transport;
	// after several, none has applied.
	eventually.Holds(t, "three subscriptions", func() bool { return len(srv.Requests()) >= 3 })
	if c.Current() != nil {
		t.Errorf("a push above MaxMsgSize applied: %d domains", len(c.Current().Domains()))
	}
	if _, acked := srv.Find(func(r xdstest.Request) bool { return r.GetResponseNonce() != "" }); acked {
		t.Error("a push above MaxMsgSize was answered")
	}
}

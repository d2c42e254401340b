package override

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/rulestest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// TestMain shares one standalone server, cluster and Sentinel set among
// the tests (redistest.Shared*).
func TestMain(m *testing.M) { redistest.Main(m) }

// fixedClock returns a clock that reads *t: tests move time by changing
// *t, between calls on the test's goroutine.
func fixedClock(t *time.Time) func() time.Time { return func() time.Time { return *t } }

// stores returns a fresh store of every kind: in-process, and Redis
// standalone, Sentinel and Cluster, each under a key of its own.
func stores(t *testing.T) map[string]func(t *testing.T) Store {
	return map[string]func(t *testing.T) Store{
		"memory": func(*testing.T) Store { return &MemStore{} },
		"standalone": func(t *testing.T) Store {
			return NewRedisStore(redistest.SharedStandalone(t).Client(t), redisKey(t), 0)
		},
		"sentinel": func(t *testing.T) Store {
			return NewRedisStore(redistest.SharedSentinel(t).FailoverClient(t), redisKey(t), 0)
		},
		"cluster": func(t *testing.T) Store {
			return NewRedisStore(redistest.SharedCluster(t).ClusterClient(t), redisKey(t), 0)
		},
	}
}

// redisKey is a hash key of the test's own, in one slot as DefaultRedisKey.
func redisKey(t *testing.T) string {
	return "ovr:" + redistest.KeyPrefix(t) + "{overrides}"
}

// newTable returns a Table on s with the clock now and its own registry.
func newTable(t *testing.T, s Store, now func() time.Time) (*Table, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	tb, err := New(Config{Store: s, Now: now, Registerer: reg, MaxTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return tb, reg
}

// testRule parses one domain with a named limit, an unnamed single limit
// and a rule of two unnamed limits.
func testRule(t *testing.T) *rules.Snapshot {
	t.Helper()
	return rulestest.Snapshot(t, "d.yaml", `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10, name: per_user, algorithm: token_bucket, burst: 20}
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 8}
  - key: path
    rate_limits:
      - {unit: second, requests_per_unit: 4}
      - {unit: hour, requests_per_unit: 100}
`, rules.Options{})
}

// limitOf returns the first rule matching k=v and its limit i.
func limitOf(t *testing.T, s *rules.Snapshot, k string, i int) (*rules.Rule, *rules.Limit) {
	t.Helper()
	r := s.Match("d", []algo.Entry{{Key: k, Value: "x"}})
	if r == nil {
		t.Fatalf("no rule for %s", k)
	}
	return r, &r.Limits[i]
}

func rpu(v uint32) *uint32 { return &v }

// effective is what tb makes of limit l of r at now.
func effective(tb *Table, now time.Time, r *rules.Rule, l *rules.Limit) algo.Policy {
	return tb.AdjustLimit(now, "d", r, l, l.Policy)
}

// TestTarget: every limit has a name an operator can type, and it is the
// one the override must carry.
func TestTarget(t *testing.T) {
	s := testRule(t)
	tests := []struct {
		key   string
		limit int
		want  string
	}{
		{"user", 0, "per_user"},
		{"ip", 0, "d.ip"},
		{"path", 0, "d.path/rate_limits[0]"},
		{"path", 1, "d.path/rate_limits[1]"},
	}
	for _, tc := range tests {
		r, l := limitOf(t, s, tc.key, tc.limit)
		if got := Target(r, l); got != tc.want {
			t.Errorf("Target(%s[%d]) = %q, want %q", tc.key, tc.limit, got, tc.want)
		}
	}
}

// TestApply: a factor scales limit and burst without rounding to zero; an
// absolute value keeps the burst's ratio; zero blocks.
func TestApply(t *testing.T) {
	tests := []struct {
		name string
		o    Override
		in   algo.Policy
		want algo.Policy
	}{
		{"halve", Override{Factor: 0.5}, algo.Policy{Limit: 10, Burst: 20}, algo.Policy{Limit: 5, Burst: 10}},
		{"never rounds to zero", Override{Factor: 0.01}, algo.Policy{Limit: 10}, algo.Policy{Limit: 1}},
		{"raise", Override{Factor: 3}, algo.Policy{Limit: 10}, algo.Policy{Limit: 30}},
		{"absolute", Override{RequestsPerUnit: rpu(5)}, algo.Policy{Limit: 10, Burst: 20}, algo.Policy{Limit: 5, Burst: 10}},
		{"absolute without burst", Override{RequestsPerUnit: rpu(50)}, algo.Policy{Limit: 10}, algo.Policy{Limit: 50}},
		{"block", Override{RequestsPerUnit: rpu(0)}, algo.Policy{Limit: 10, Burst: 20}, algo.Policy{Limit: 0, Burst: 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.o.Apply(tc.in); got != tc.want {
				t.Errorf("Apply(%+v) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
}

// TestSetRefused: bad overrides are refused with the field named, and
// nothing is stored.
func TestSetRefused(t *testing.T) {
	good := Override{Domain: "d", Limit: "per_user", Source: Manual, Factor: 0.5, Reason: "incident"}
	tests := []struct {
		name string
		edit func(*Override)
		ttl  time.Duration
		want string
	}{
		{"no ttl", func(*Override) {}, 0, "ttl"},
		{"ttl too long", func(*Override) {}, 2 * time.Hour, "ttl"},
		{"no domain", func(o *Override) { o.Domain = "" }, time.Minute, "domain: empty"},
		{"no limit", func(o *Override) { o.Limit = "" }, time.Minute, "limit: empty"},
		{"no reason", func(o *Override) { o.Reason = "" }, time.Minute, "reason: empty"},
		{"both", func(o *Override) { o.RequestsPerUnit = rpu(3) }, time.Minute, "exactly one"},
		{"neither", func(o *Override) { o.Factor = 0 }, time.Minute, "exactly one"},
		{"huge factor", func(o *Override) { o.Factor = 1000 }, time.Minute, "factor"},
		{"bad source", func(o *Override) { o.Source = "cron" }, time.Minute, "source"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := &MemStore{}
			now := time.Unix(1000, 0)
			tb, _ := newTable(t, st, fixedClock(&now))
			o := good
			tc.edit(&o)
			_, err := tb.Set(context.Background(), o, tc.ttl)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Set: err = %v, want one naming %q", err, tc.want)
			}
			if all, _ := st.Load(context.Background()); len(all) != 0 {
				t.Errorf("stored %v after a refused Set", all)
			}
		})
	}
}

// TestReplicas: on every store, an override set through one replica's
// Table applies on another's after its refresh, manual wins over
// adaptive, it expires by itself (logged and counted as such), and a
// clear removes it everywhere.
func TestReplicas(t *testing.T) {
	snap := testRule(t)
	r, l := limitOf(t, snap, "user", 0)
	pr, pl := limitOf(t, snap, "path", 1)
	ctx := context.Background()
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st := newStore(t)
			now := time.Unix(1_000_000, 0)
			a, _ := newTable(t, st, fixedClock(&now))
			b, regB := newTable(t, st, fixedClock(&now))
			mustSet(t, a, Override{Domain: "d", Limit: "per_user", Source: Adaptive, Factor: 0.8, Reason: "cpu"}, time.Hour)
			mustSet(t, a, Override{Domain: "d", Limit: "per_user", Source: Manual, Factor: 0.5, Reason: "incident"}, time.Minute)
			mustSet(t, a, Override{Domain: "d", Limit: "d.path/rate_limits[1]", Source: Manual, RequestsPerUnit: rpu(7), Reason: "bots"}, time.Hour)
			if got := effective(b, now, r, l); got.Limit != 10 {
				t.Fatalf("replica b before its refresh: limit %d, want the configured 10", got.Limit)
			}
			refresh(t, b)
			for _, tb := range []*Table{a, b} {
				if got := effective(tb, now, r, l); got.Limit != 5 || got.Burst != 10 {
					t.Errorf("manual override: %+v, want limit 5 burst 10 (manual wins over adaptive)", got)
				}
				if got := effective(tb, now, pr, pl); got.Limit != 7 {
					t.Errorf("absolute override: limit %d, want 7", got.Limit)
				}
			}
			// The manual override expires: the adaptive one shows through.
			now = now.Add(time.Minute)
			refresh(t, b)
			if got := effective(b, now, r, l); got.Limit != 8 {
				t.Errorf("after the manual override expired: limit %d, want adaptive 8", got.Limit)
			}
			if n := testutil.ToFloat64(b.changes.WithLabelValues("expire", "manual")); n != 1 {
				t.Errorf("expire count %v, want 1", n)
			}
			list, err := b.List(ctx)
			if err != nil || len(list) != 2 {
				t.Fatalf("List = %v, %v; want the adaptive and the absolute override", list, err)
			}
			gone, err := b.Clear(ctx, Filter{Domain: "d", Limit: "per_user"}, "tester", "over")
			if err != nil || len(gone) != 1 || gone[0].Source != Adaptive {
				t.Fatalf("Clear = %v, %v; want the adaptive override", gone, err)
			}
			refresh(t, a)
			if got := effective(a, now, r, l); got.Limit != 10 {
				t.Errorf("after clear on b, a has limit %d, want the configured 10", got.Limit)
			}
			if n := testutil.ToFloat64(b.changes.WithLabelValues("clear", "adaptive")); n != 1 {
				t.Errorf("clear count %v, want 1", n)
			}
			if n, err := testutil.GatherAndCount(regB, "envoy_rls_override_changes_total"); err != nil || n == 0 {
				t.Errorf("changes metric not registered: %d, %v", n, err)
			}
		})
	}
}

// mustSet sets o on tb for ttl, failing t if it cannot.
func mustSet(t *testing.T, tb *Table, o Override, ttl time.Duration) {
	t.Helper()
	if _, err := tb.Set(context.Background(), o, ttl); err != nil {
		t.Fatal(err)
	}
}

func refresh(t *testing.T, tb *Table) {
	t.Helper()
	if err := tb.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestLock: one holder per ttl on every store.
func TestLock(t *testing.T) {
	ctx := context.Background()
	for name, newStore := range stores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st := newStore(t)
			if ok, err := st.Lock(ctx, "x", time.Hour); !ok || err != nil {
				t.Fatalf("first Lock = %v, %v; want it taken", ok, err)
			}
			if ok, err := st.Lock(ctx, "x", time.Hour); ok || err != nil {
				t.Fatalf("second Lock = %v, %v; want it refused while held", ok, err)
			}
			if ok, err := st.Lock(ctx, "y", time.Hour); !ok || err != nil {
				t.Fatalf("Lock of another name = %v, %v; want it taken", ok, err)
			}
		})
	}
}

// TestRefreshFailureKeepsIndex: a store that cannot be read leaves the
// overrides last read in force, and the failure is counted.
func TestRefreshFailureKeepsIndex(t *testing.T) {
	srv := redistest.Standalone(t)
	st := NewRedisStore(srv.Client(t), redisKey(t), 0)
	now := time.Now()
	tb, _ := newTable(t, st, fixedClock(&now))
	mustSet(t, tb, Override{Domain: "d", Limit: "per_user", Source: Manual, Factor: 0.5, Reason: "r"}, time.Hour)
	srv.Stop(t)
	if err := tb.Refresh(context.Background()); err == nil {
		t.Fatal("Refresh with Redis stopped: no error")
	}
	snap := testRule(t)
	r, l := limitOf(t, snap, "user", 0)
	if got := effective(tb, now, r, l); got.Limit != 5 {
		t.Errorf("after a failed refresh: limit %d, want the override's 5 kept", got.Limit)
	}
	if n := testutil.ToFloat64(tb.errs); n != 1 {
		t.Errorf("refresh errors %v, want 1", n)
	}
}

// halvedTable returns an in-memory table, fixed at its now, whose manual
// override halves limit in domain d.
func halvedTable(t *testing.T, limit string) (*Table, time.Time) {
	t.Helper()
	now := time.Unix(1000, 0)
	tb, _ := newTable(t, &MemStore{}, fixedClock(&now))
	mustSet(t, tb, Override{Domain: "d", Limit: limit, Source: Manual, Factor: 0.5, Reason: "r"}, time.Hour)
	return tb, now
}

// TestDescribe: /debug/config's view names each limit's effective value
// and source.
func TestDescribe(t *testing.T) {
	snap := testRule(t)
	tb, now := halvedTable(t, "d.ip")
	eff := func(now time.Time, domain string, r *rules.Rule, l *rules.Limit) uint32 {
		return uint32(tb.AdjustLimit(now, domain, r, l, l.Policy).Limit)
	}
	got := map[string]LimitView{}
	for _, v := range tb.Describe(snap, now, eff) {
		got[v.Limit] = v
	}
	if v := got["d.ip"]; v.Source != "manual" || v.Effective != 4 || v.Configured != 8 || v.Override == nil || v.Override.Reason != "r" {
		t.Errorf("d.ip: %+v, want manual 8 -> 4 with the override", v)
	}
	if v := got["per_user"]; v.Source != "config" || v.Effective != 10 {
		t.Errorf("per_user: %+v, want config 10", v)
	}
	if len(got) != 4 {
		t.Errorf("%d limits described, want 4", len(got))
	}
	// explain names the override as the source of the changed limit.
	r, l := limitOf(t, snap, "ip", 0)
	if e := rls.EffectiveLimit([]rls.LimitAdjuster{tb}, now, "d", r, l); len(e.Sources) != 1 || e.Sources[0].Name != "runtime override" || e.RequestsPerUnit != 4 {
		t.Errorf("effective %+v, want 4 from the runtime override", e)
	}
}

// TestAdjustLimitAllocs: the request path allocates nothing, for a domain
// without overrides or for a limit that has one.
func TestAdjustLimitAllocs(t *testing.T) {
	snap := testRule(t)
	tb, now := halvedTable(t, "per_user")
	for _, tc := range []struct {
		domain, key string
		limit       int
	}{{"other", "path", 1}, {"d", "user", 0}} {
		r, l := limitOf(t, snap, tc.key, tc.limit)
		if n := testing.AllocsPerRun(100, func() { tb.AdjustLimit(now, tc.domain, r, l, l.Policy) }); n != 0 {
			t.Errorf("AdjustLimit of %s in domain %q: %v allocations, want 0", Target(r, l), tc.domain, n)
		}
	}
}

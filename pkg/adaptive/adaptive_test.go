package adaptive

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"

	"github.com/envoy-rls/envoy-rls/internal/testkit/promtest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/override"
)

// TestMain shares one standalone Redis among the tests.
func TestMain(m *testing.M) { redistest.Main(m) }

// TestParse: defaults are filled, and every bad field is named with its path.
func TestParse(t *testing.T) {
	f, err := Parse("a.yaml", []byte(`
controllers:
  - domain: d
    limit: l
    signals: [{name: cpu, query: up, high: 0.8, low: 0.5}]
`))
	if err != nil {
		t.Fatal(err)
	}
	c := f.Controllers[0]
	if f.interval != DefaultInterval || c.Decrease != 0.8 || c.Increase != 0.1 || c.Floor != 0.1 || c.Ceiling != 1 || c.minInterval != DefaultInterval || c.ttl != 10*DefaultInterval {
		t.Errorf("defaults: interval %v, %+v", f.interval, c)
	}
	bad := []struct {
		name, yaml, want string
	}{
		{"unknown field", "controllers: [{domain: d, limit: l, signals: [{query: up}], decrese: 0.5}]", "decrese"},
		{"no controllers", "interval: 10s", "controllers: empty"},
		{"bad interval", "interval: soon\ncontrollers: [{domain: d, limit: l, signals: [{query: up}]}]", "interval"},
		{"no limit", "controllers: [{domain: d, signals: [{query: up}]}]", "controllers[0]: domain and limit are required"},
		{"duplicate", "controllers: [{domain: d, limit: l, signals: [{query: up}]}, {domain: d, limit: l, signals: [{query: up}]}]", "controllers[1]: same domain and limit"},
		{"decrease above 1", "controllers: [{domain: d, limit: l, decrease: 1.5, signals: [{query: up}]}]", "controllers[0].decrease"},
		{"floor above ceiling", "controllers: [{domain: d, limit: l, floor: 0.9, ceiling: 0.5, signals: [{query: up}]}]", "floor 0.9, ceiling 0.5"},
		{"no signals", "controllers: [{domain: d, limit: l}]", "controllers[0].signals: empty"},
		{"no query", "controllers: [{domain: d, limit: l, signals: [{name: x}]}]", "controllers[0].signals[0].query: empty"},
		{"low above high", "controllers: [{domain: d, limit: l, signals: [{query: up, high: 1, low: 2}]}]", "controllers[0].signals[0]: low 2 above high 1"},
		{"bad min_interval", "controllers: [{domain: d, limit: l, min_interval: -1s, signals: [{query: up}]}]", "controllers[0].min_interval"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("a.yaml", []byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "a.yaml") {
				t.Errorf("err = %v, want one naming a.yaml and %q", err, tc.want)
			}
		})
	}
}

// fixture is a real Prometheus scraping a gauge the test sets, and an
// override table on a real Redis.
type fixture struct {
	prom  *promtest.Server
	gauge *promtest.Gauge
	store override.Store
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	g := promtest.NewGauge(t, "test_load")
	return &fixture{
		prom:  promtest.Start(t, g.Addr),
		gauge: g,
		store: override.NewRedisStore(redistest.SharedStandalone(t).Client(t), "ovr:"+redistest.KeyPrefix(t)+"{o}", 0),
	}
}

// controllers returns controllers over yaml on a Table of f's store; each
// call is one replica.
func (f *fixture) controllers(t *testing.T, yaml string) (*Controllers, *override.Table) {
	t.Helper()
	file, err := Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	tb, err := override.New(override.Config{Store: f.store})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(file, Options{Prometheus: f.prom.URL, Table: tb, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return c, tb
}

// set drives the gauge to v and waits until Prometheus has scraped it.
func (f *fixture) set(t *testing.T, v float64) {
	t.Helper()
	f.gauge.Set(v)
	f.prom.AwaitValue(t, f.gauge, v)
}

// factor returns the stored adaptive factor of d/l, 1 when there is none.
func factor(t *testing.T, tb *override.Table, limit string) float64 {
	t.Helper()
	list, err := tb.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range list {
		if o.Domain == "d" && o.Limit == limit && o.Source == override.Adaptive {
			return o.Factor
		}
	}
	return 1
}

// controllerYAML has a 1 ms interval, so the per-interval lock never
// stands between two Step calls of a test, and no minimum interval.
const controllerYAML = `
interval: 1ms
controllers:
  - domain: d
    limit: l
    signals: [{name: load, query: max(test_load), high: 0.8, low: 0.5}]
    floor: 0.5
    min_interval: 1ns
`

// TestController against a real Prometheus: a high signal cuts the factor
// by 20% per check down to the floor, between the marks it holds, low
// signals add 0.1 per check up to the ceiling; a manual override pins it;
// a failing, empty or bad query, or Prometheus down, leaves it where it is
// and is counted.
func TestController(t *testing.T) {
	f := newFixture(t)
	c, tb := f.controllers(t, controllerYAML)
	ctx := context.Background()
	steps := func(t *testing.T, v float64, want ...float64) {
		t.Helper()
		f.set(t, v)
		for i, w := range want {
			stepOnce(t, c, "l")
			if got := factor(t, tb, "l"); got != w {
				t.Fatalf("signal %v, check %d: factor %v, want %v", v, i+1, got, w)
			}
		}
	}
	steps(t, 0.9, 0.8, 0.64, 0.512, 0.5, 0.5) // ×0.8 down to the floor
	steps(t, 0.6, 0.5, 0.5)                   // between the marks: hold
	steps(t, 0.1, 0.6, 0.7, 0.8, 0.9, 1, 1)   // +0.1 up to the ceiling
	steps(t, 0.9, 0.8)

	if _, err := tb.Set(ctx, override.Override{Domain: "d", Limit: "l", Source: override.Manual, Factor: 0.3, Reason: "pin"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	steps(t, 0.9, 0.8, 0.8) // pinned: the adaptive factor stays
	if n := testutil.ToFloat64(c.steps.WithLabelValues("d", "l", "pinned")); n != 2 {
		t.Errorf("pinned checks %v, want 2", n)
	}
	if _, err := tb.Clear(ctx, override.Filter{Domain: "d", Source: override.Manual}, "t", "unpin"); err != nil {
		t.Fatal(err)
	}

	failing := []struct {
		name, query string
	}{
		{"bad promql", "max(test_load"},
		{"empty", "max(no_such_metric)"},
		{"nan", "max(test_load) / 0 * 0"},
	}
	for _, tc := range failing {
		t.Run(tc.name, func(t *testing.T) {
			bad, btb := f.controllers(t, strings.Replace(controllerYAML, "max(test_load)", tc.query, 1))
			stepOnce(t, bad, "l")
			if got := factor(t, btb, "l"); got != 0.8 {
				t.Errorf("factor %v after a failing query, want 0.8 kept", got)
			}
			if n := testutil.ToFloat64(bad.failures.WithLabelValues("d", "l", "load")); n != 1 {
				t.Errorf("query failures %v, want 1", n)
			}
		})
	}

	f.prom.Stop()
	twoChecksKeep(t, "Prometheus down", c, tb, "l", c.failures.WithLabelValues("d", "l", "load"), 2)
}

// twoChecksKeep runs two checks of limit, after which its factor must
// still be 0.8 and counter (what kept it) must read want.
func twoChecksKeep(t *testing.T, why string, c *Controllers, tb *override.Table, limit string, counter prometheus.Counter, want float64) {
	t.Helper()
	stepOnce(t, c, limit)
	stepOnce(t, c, limit)
	if got := factor(t, tb, limit); got != 0.8 {
		t.Errorf("%s: factor %v after two checks, want 0.8 kept", why, got)
	}
	if n := testutil.ToFloat64(counter); n != want {
		t.Errorf("%s: counted %v, want %v", why, n, want)
	}
}

// TestControllerReplicasAndMinInterval: of two replicas checking in the
// same interval only one acts (the Redis lock), and a change is not
// followed by another within min_interval.
func TestControllerReplicasAndMinInterval(t *testing.T) {
	f := newFixture(t)
	hourly := strings.Replace(controllerYAML, "interval: 1ms", "interval: 1h", 1)
	a, tb := f.controllers(t, hourly)
	b, _ := f.controllers(t, hourly)
	ctx := context.Background()
	f.set(t, 0.9)
	a.Step(ctx)
	b.Step(ctx)
	if got := factor(t, tb, "l"); got != 0.8 {
		t.Fatalf("factor %v after both replicas checked, want one cut to 0.8", got)
	}
	if n := testutil.ToFloat64(b.steps.WithLabelValues("d", "l", "locked")); n != 1 {
		t.Errorf("replica b locked out %v times, want 1", n)
	}

	slow, stb := f.controllers(t, strings.NewReplacer("limit: l", "limit: m", "min_interval: 1ns", "min_interval: 1h").Replace(controllerYAML))
	// The first check cuts (no factor yet), the second is within min_interval.
	twoChecksKeep(t, "min_interval", slow, stb, "m", slow.steps.WithLabelValues("d", "m", "hold"), 1)
}

// stepOnce runs c's checks until one of limit's is not locked out by the
// previous check's 1 ms lock.
func stepOnce(t *testing.T, c *Controllers, limit string) {
	t.Helper()
	acted := func() (n float64) {
		for _, o := range []string{"decrease", "increase", "hold", "pinned", "failed"} {
			n += testutil.ToFloat64(c.steps.WithLabelValues("d", limit, o))
		}
		return n
	}
	before := acted()
	for range 10_000 {
		c.Step(context.Background())
		if acted() > before {
			return
		}
	}
	t.Fatal("every check was locked out")
}

// TestNext: the control law alone, at its edges.
func TestNext(t *testing.T) {
	ct := &Controller{Decrease: 0.8, Increase: 0.1, Floor: 0.25, Ceiling: 1.5}
	tests := []struct {
		name            string
		factor          float64
		anyHigh, allLow bool
		want            float64
		outcome         string
	}{
		{"high cuts", 1, true, false, 0.8, "decrease"},
		{"high wins over low", 1, true, true, 0.8, "decrease"},
		{"floor", 0.3, true, false, 0.25, "decrease"},
		{"at the floor", 0.25, true, false, 0.25, "hold"},
		{"low adds", 1, false, true, 1.1, "increase"},
		{"ceiling above 1", 1.45, false, true, 1.5, "increase"},
		{"between marks", 0.7, false, false, 0.7, "hold"},
		{"no drift", 0.2 + 0.1, false, true, 0.4, "increase"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, outcome := ct.next(tc.factor, tc.anyHigh, tc.allLow)
			if got != tc.want || outcome != tc.outcome {
				t.Errorf("next(%v) = %v %s, want %v %s", tc.factor, got, outcome, tc.want, tc.outcome)
			}
		})
	}
}

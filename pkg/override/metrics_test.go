package override

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestActiveGauge: envoy_rls_overrides_active counts the overrides in
// force by source, and drops one as soon as it expires, before any
// refresh.
func TestActiveGauge(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	tb, reg := newTable(t, &MemStore{}, fixedClock(&now))
	want := func(manual, adaptive int) {
		t.Helper()
		exp := "# HELP envoy_rls_overrides_active Runtime limit overrides in force on this replica, by source (manual, adaptive).\n" +
			"# TYPE envoy_rls_overrides_active gauge\n" +
			"envoy_rls_overrides_active{source=\"adaptive\"} " + strconv.Itoa(adaptive) + "\n" +
			"envoy_rls_overrides_active{source=\"manual\"} " + strconv.Itoa(manual) + "\n"
		if err := testutil.GatherAndCompare(reg, strings.NewReader(exp), "envoy_rls_overrides_active"); err != nil {
			t.Fatal(err)
		}
	}
	want(0, 0)
	mustSet(t, tb, Override{Domain: "d", Limit: "per_user", Source: Manual, Factor: 0.5, Reason: "incident"}, time.Minute)
	mustSet(t, tb, Override{Domain: "d", Limit: "per_user", Source: Adaptive, Factor: 0.8, Reason: "cpu"}, time.Hour)
	mustSet(t, tb, Override{Domain: "d", Limit: "d.ip", Source: Manual, Factor: 0.5, Reason: "bots"}, time.Hour)
	want(2, 1)
	now = now.Add(2 * time.Minute)
	want(1, 1)
}

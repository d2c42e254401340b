package rls

import (
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// TestEnvoyUnits checks the one unit map against Envoy's enums by name, so
// a unit added to algo or renumbered in Envoy cannot go unmapped.
func TestEnvoyUnits(t *testing.T) {
	for _, u := range algo.Units {
		if got := responseUnit(u); got.String() != u.EnvoyName() {
			t.Errorf("responseUnit(%v) = %v, want %s", u, got, u.EnvoyName())
		}
	}
	if got := responseUnit(0); got != pb.RateLimitResponse_RateLimit_UNKNOWN {
		t.Errorf("responseUnit(0) = %v, want UNKNOWN", got)
	}
	for v, name := range typev3.RateLimitUnit_name {
		u, ok := overrideUnit(typev3.RateLimitUnit(v))
		switch {
		case v == int32(typev3.RateLimitUnit_UNKNOWN) && ok:
			t.Errorf("overrideUnit(UNKNOWN) = %v, want none", u)
		case v != int32(typev3.RateLimitUnit_UNKNOWN) && (!ok || u.EnvoyName() != name):
			t.Errorf("overrideUnit(%s) = %v, %v; want the unit of that name", name, u, ok)
		}
	}
	if _, ok := overrideUnit(typev3.RateLimitUnit(99)); ok {
		t.Error("overrideUnit(99) found a unit")
	}
	if got, want := overrideUnitNames(), "SECOND|MINUTE|HOUR|DAY|MONTH|YEAR"; got != want {
		t.Errorf("overrideUnitNames() = %q, want %q", got, want)
	}
}

package meshconfig

import (
	"testing"
)

// versionsComponent limits a service's canary and stable versions apart.
const versionsComponent = "components/per-version"

// versionSamples are calls reaching the per-version sidecar, with the
// rules of domain "versions" each descriptor must reach.
func versionSamples() []sample {
	withVersion := func(v string) sampleRequest {
		return sampleRequest{path: "/reviews/1", headers: map[string]string{"x-version": v}}
	}
	return []sample{
		{name: "routed to stable", req: withVersion("stable"),
			want: []wantDescriptor{{d("version", "stable"), "versions.version_stable"}}},
		{name: "routed to the canary", req: withVersion("canary"),
			want: []wantDescriptor{{d("version", "canary"), "versions.version_canary"}}},
		{name: "a version with no rule of its own", req: withVersion("v3"),
			want: []wantDescriptor{{d("version", "v3"), "versions.version"}}},
		{name: "no route named a version", req: sampleRequest{path: "/reviews/1"},
			want: []wantDescriptor{{d("version", "unrouted"), "versions.version_unrouted"}}},
	}
}

// TestPerVersionLimits: the per-version EnvoyFilter decodes into Istio's
// and Envoy's types, its descriptors reach the intended rules of
// examples/config/versions.yaml, and those rules limit the canary and
// stable versions differently (the canary's with a warm-up ramp).
func TestPerVersionLimits(t *testing.T) {
	ruleFiles := exampleRuleFiles(t)
	snap := mustLoadRules(t, ruleFiles)
	objs, err := renderManifests(variantFS(t, []string{versionsComponent}, nil), ruleFiles)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ef := range envoyFilters(objs) {
		if ef.meta.Name != "envoy-rls-versions" {
			continue
		}
		found = true
		p, err := checkEnvoyFilter(ef, objs.Services)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkSamples(p.where, p.filter, p.vhosts, snap, versionSamples()); err != nil {
			t.Error(err)
		}
	}
	if !found {
		t.Fatalf("%s renders no EnvoyFilter envoy-rls-versions", versionsComponent)
	}

	limit := func(version string) (rpu uint32, warm bool) {
		t.Helper()
		r := snap.Match("versions", d("version", version))
		if r == nil || len(r.Limits) != 1 {
			t.Fatalf("version %s: rule %+v, want one with one limit", version, r)
		}
		return r.Limits[0].RequestsPerUnit, r.Limits[0].Warmup != nil
	}
	stable, stableWarm := limit("stable")
	canary, canaryWarm := limit("canary")
	if canary >= stable || !canaryWarm || stableWarm {
		t.Errorf("canary %d/s (warm-up %v), stable %d/s (warm-up %v): want the canary below stable and ramping, stable not", canary, canaryWarm, stable, stableWarm)
	}
}

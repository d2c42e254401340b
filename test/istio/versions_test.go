package istio

import (
	"encoding/json"
	"strings"
	"testing"
)

// withProxyVersion returns a copy of the EnvoyFilter, renamed, whose every
// patch matches only proxies whose ISTIO_VERSION matches re, and whose
// rate-limit filter carries statPrefix (to tell the copies apart in a
// config dump).
func withProxyVersion(t *testing.T, f object, suffix, re, statPrefix string) object {
	t.Helper()
	var whole map[string]any
	if err := json.Unmarshal(f.raw, &whole); err != nil {
		t.Fatal(err)
	}
	whole["metadata"].(map[string]any)["name"] = f.Metadata.Name + suffix
	spec := whole["spec"].(map[string]any)
	for _, p := range spec["configPatches"].([]any) {
		pm := p.(map[string]any)
		match := pm["match"].(map[string]any)
		match["proxy"] = map[string]any{"proxyVersion": re}
		if pm["applyTo"] == "HTTP_FILTER" {
			tc := pm["patch"].(map[string]any)["value"].(map[string]any)["typed_config"].(map[string]any)
			tc["stat_prefix"] = statPrefix
		}
	}
	raw, err := json.Marshal(whole)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := parseObjects("proxyVersion copy", raw)
	if err != nil || len(objs) != 1 {
		t.Fatalf("proxyVersion copy: %v", err)
	}
	return objs[0]
}

// TestProxyVersion: two gateways whose ISTIO_VERSION differ get the copy
// of the shipped gateway EnvoyFilter their proxyVersion match selects, and
// only that one, and both are limited by it.
func TestProxyVersion(t *testing.T) {
	base := kustomizeSet(t, "base", nil)
	set := manifestSet{Name: "kustomize base, gateway EnvoyFilter split by proxyVersion"}
	for _, o := range base.Objects {
		if o.Kind != "EnvoyFilter" {
			set.Objects = append(set.Objects, o)
			continue
		}
		set.Objects = append(set.Objects,
			withProxyVersion(t, o, "-1-31", `^1\.31.*`, "istio_1_31"),
			withProxyVersion(t, o, "-1-30", `^1\.30.*`, "istio_1_30"))
	}
	gw := func(name, version string) proxySpec {
		p := istioctlGateway
		p.Name, p.IstioVersion = name, version
		p.Labels = map[string]string{"istio": "ingressgateway", "app": name}
		return p
	}
	set.Gateways = []proxySpec{gw("ingressgateway-1-31", "1.31.0"), gw("ingressgateway-1-30", "1.30.2")}
	m, err := startMesh(t, set)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.check(); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"istio_1_31", "istio_1_30"} {
		p := m.Gateways[i]
		dump, err := p.configDump()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, rl := range facts(dump).rateLimitFilters {
			sp, _ := rl["stat_prefix"].(string)
			got = append(got, sp)
		}
		if strings.Join(got, ",") != want {
			t.Errorf("%v (ISTIO_VERSION %s): rate-limit filters with stat_prefix %v, want only %s", p.Spec, p.Spec.IstioVersion, got, want)
		}
	}
}

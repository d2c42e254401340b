package meshconfig

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// checkHoldTimeout checks that filter's timeout exceeds every max_delay of
// its domain's rules: a request held longer than Envoy waits would be
// answered by Envoy's failure mode instead, after its slot was spent.
func checkHoldTimeout(where string, filter *ratelimitv3.RateLimit, snap *rules.Snapshot) error {
	timeout := filter.GetTimeout().AsDuration()
	var errs []error
	for _, d := range snap.Domains() {
		if d.Name != filter.GetDomain() {
			continue
		}
		for _, r := range d.Rules() {
			for _, l := range r.Limits {
				if l.MaxDelay > 0 && l.MaxDelay >= timeout {
					errs = append(errs, fmt.Errorf("%s: rate_limit filter timeout %s does not exceed max_delay %s of rule %s limit %s (on_limit: delay): Envoy would give up before the request's turn",
						where, timeout, l.MaxDelay, r.Path, l.Label))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// holdTimeoutErrors checks every shipped Envoy configuration (the
// bootstrap in envoy-config/ and each EnvoyFilter of the manifests' builds)
// against the rules of examples/config, read through o, and returns how
// many filters it checked.
func holdTimeoutErrors(t *testing.T, o overrides) (filters int, err error) {
	t.Helper()
	ruleFiles := o.ruleFiles(t)
	snap, err := loadRules(ruleFiles)
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, name := range envoyConfigFiles(t) {
		_, proxies, err := loadBootstrap(name, o.read(t, name))
		if err != nil {
			return 0, err
		}
		for _, p := range proxies {
			if p.filter != nil {
				filters++
				errs = append(errs, checkHoldTimeout(name+": "+p.where, p.filter, snap))
			}
		}
	}
	for _, components := range [][]string{{"components/sidecar", versionsComponent}, {"components/sidecar-uds"}} {
		objs, err := renderManifests(variantFS(t, components, o.manifestOverrides()), ruleFiles)
		if err != nil {
			return 0, fmt.Errorf("manifests with %v: %w", components, err)
		}
		for _, ef := range envoyFilters(objs) {
			p, err := checkEnvoyFilter(ef, objs.Services)
			if err != nil {
				return 0, err
			}
			filters++
			errs = append(errs, checkHoldTimeout(p.where, p.filter, snap))
		}
	}
	return filters, errors.Join(errs...)
}

// TestEnvoyTimeoutsExceedMaxDelay: every shipped rate_limit filter waits
// longer than the longest max_delay its rules use (the VIP tier of
// examples/config/edge.yaml queues), and a rule whose max_delay reaches the
// timeout is caught.
func TestEnvoyTimeoutsExceedMaxDelay(t *testing.T) {
	n, err := holdTimeoutErrors(t, overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if n < 4 {
		t.Fatalf("checked %d rate_limit filters, want the bootstrap's and every EnvoyFilter's (at least 4)", n)
	}
	edge := string(childproc.ReadRepoFile(t, "examples/config/edge.yaml"))
	if !strings.Contains(edge, "max_delay: 200ms") {
		t.Fatal("examples/config/edge.yaml has no max_delay: 200ms for the mutation below")
	}
	mutated := []byte(strings.Replace(edge, "max_delay: 200ms", "max_delay: 250ms", 1))
	longer := overrides{"examples/config/edge.yaml": mutated, "manifests/istio/rules/edge.yaml": mutated}
	_, err = holdTimeoutErrors(t, longer)
	// The edge domain's filters: the bootstrap's and the gateway's.
	wantErr(t, err, "envoy-config/envoy.yaml", "EnvoyFilter istio-system/envoy-rls-gateway", "timeout 250ms does not exceed max_delay 250ms", "vip_per_second")
}

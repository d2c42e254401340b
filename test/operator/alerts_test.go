package operator

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"

	"sigs.k8s.io/yaml"
)

// The rules file, its promtool unit tests, and the chart's copy.
const (
	rulesFile      = "deploy/prometheus/envoy-rls.rules.yaml"
	rulesTestFile  = "deploy/prometheus/envoy-rls.rules.test.yaml"
	chartRulesFile = "charts/envoy-rls/files/envoy-rls.rules.yaml"
	kustomizeRule  = "manifests/istio/components/monitoring/prometheusrule.yaml"
	runbookFile    = "docs/runbook.md"
)

// wantAlerts are the alerts the issue asks for; the rules file must have
// each (and may have no other without a runbook section, checked below).
var wantAlerts = []string{
	"EnvoyRLSFailureModeInForce",
	"EnvoyRLSBreakerOpen",
	"EnvoyRLSReloadFailing",
	"EnvoyRLSXDSDisconnected",
	"EnvoyRLSXDSNacking",
	"EnvoyRLSOverLimitRatioSpike",
	"EnvoyRLSMemstoreEvicting",
	"EnvoyRLSLatencyAboveEnvoyTimeout",
}

// promtool returns the promtool binary (Debian's prometheus package, which
// make test-deps installs). A missing promtool fails the test.
func promtool(t testing.TB) string {
	t.Helper()
	p, err := childproc.Tool{
		Name:    "promtool",
		Env:     "PROMTOOL_BIN",
		Pinned:  []string{"/usr/bin/promtool"},
		Path:    []string{"promtool"},
		Install: "it comes with Debian's prometheus package: make test-deps",
	}.Find()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ruleFile is the part of a Prometheus rule file these tests read.
type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Record      string            `json:"record"`
			Expr        string            `json:"expr"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// alertNames returns the alerts of a rule file in order.
func alertNames(t testing.TB, data []byte) []string {
	t.Helper()
	var f ruleFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var out []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r.Alert)
			}
		}
	}
	return out
}

// TestAlertRulesPromtool runs promtool's syntax check on the rules and
// their unit tests (each alert fires where it should and not where it
// should not), and checks that every alert has a unit test case.
func TestAlertRulesPromtool(t *testing.T) {
	bin := promtool(t)
	dir := childproc.RepoPath("deploy/prometheus")
	for _, args := range [][]string{
		{"check", "rules", filepath.Base(rulesFile)},
		{"test", "rules", filepath.Base(rulesTestFile)},
	} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	tests := string(childproc.ReadRepoFile(t, rulesTestFile))
	for _, a := range alertNames(t, childproc.ReadRepoFile(t, rulesFile)) {
		if !strings.Contains(tests, "alertname: "+a+"\n") {
			t.Errorf("%s has no promtool test case for alert %s", rulesTestFile, a)
		}
	}
}

// TestAlertRulesCoverTheIssue checks that the rules file has every alert
// the operator's kit promises, each with a severity and a runbook link to
// its section.
func TestAlertRulesCoverTheIssue(t *testing.T) {
	var f ruleFile
	if err := yaml.Unmarshal(childproc.ReadRepoFile(t, rulesFile), &f); err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			have[r.Alert] = true
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, s)
			}
			if want := runbookFile + "#" + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
				t.Errorf("alert %s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
			}
		}
	}
	for _, a := range wantAlerts {
		if !have[a] {
			t.Errorf("%s has no alert %s", rulesFile, a)
		}
	}
}

// TestChartShipsTheSameRules keeps the chart's PrometheusRule and the plain
// rules file from drifting: the chart reads its copy with .Files.Get.
func TestChartShipsTheSameRules(t *testing.T) {
	if plain, chart := childproc.ReadRepoFile(t, rulesFile), childproc.ReadRepoFile(t, chartRulesFile); !bytes.Equal(plain, chart) {
		t.Fatalf("%s differs from %s: copy it (cp %s %s)", chartRulesFile, rulesFile, rulesFile, chartRulesFile)
	}
}

// TestKustomizeShipsTheSameRules keeps the kustomize component's
// PrometheusRule equal to the plain rules file (kustomize cannot read a
// file outside its directory, so it holds a copy).
func TestKustomizeShipsTheSameRules(t *testing.T) {
	var plain, rule struct {
		Groups any `json:"groups"`
		Spec   struct {
			Groups any `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(childproc.ReadRepoFile(t, rulesFile), &plain); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(childproc.ReadRepoFile(t, kustomizeRule), &rule); err != nil {
		t.Fatal(err)
	}
	if plain.Groups == nil || !reflect.DeepEqual(plain.Groups, rule.Spec.Groups) {
		t.Fatalf("%s spec.groups differs from %s's groups: copy them", kustomizeRule, rulesFile)
	}
}

// heading matches a markdown section heading of level 2 or 3.
var heading = regexp.MustCompile(`(?m)^#{2,3} +(\S.*?)\s*$`)

// TestRunbookCoversEveryAlert checks docs/runbook.md has a section named
// after each alert of the rules file, and that each says what the alert
// means, how to confirm it and what to do.
func TestRunbookCoversEveryAlert(t *testing.T) {
	if err := checkRunbook(string(childproc.ReadRepoFile(t, runbookFile)), alertNames(t, childproc.ReadRepoFile(t, rulesFile))); err != nil {
		t.Fatal(err)
	}
}

// checkRunbook returns what runbook lacks for alerts.
func checkRunbook(runbook string, alerts []string) error {
	sections := map[string]string{}
	locs := heading.FindAllStringSubmatchIndex(runbook, -1)
	for i, l := range locs {
		end := len(runbook)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		sections[runbook[l[2]:l[3]]] = runbook[l[1]:end]
	}
	var missing []string
	for _, a := range alerts {
		body, ok := sections[a]
		if !ok {
			missing = append(missing, a+": no section")
			continue
		}
		for _, part := range []string{"**Means.**", "**Confirm.**", "**Do.**"} {
			if !strings.Contains(body, part) {
				missing = append(missing, fmt.Sprintf("%s: no %s paragraph", a, part))
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s:\n  %s", runbookFile, strings.Join(missing, "\n  "))
	}
	return nil
}

// TestCheckRunbookCatchesGaps shows the runbook check fails on a missing
// section and on a section without its parts.
func TestCheckRunbookCatchesGaps(t *testing.T) {
	for _, tc := range []struct {
		name, runbook string
	}{
		{"no section", "# Runbook\n## Other\n**Means.** **Confirm.** **Do.**\n"},
		{"no Do", "# Runbook\n## A\n**Means.** x\n**Confirm.** y\n## B\n**Do.** z\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := checkRunbook(tc.runbook, []string{"A"}); err == nil {
				t.Fatal("checkRunbook passed; want an error")
			}
		})
	}
	if err := checkRunbook("## A\n**Means.** x **Confirm.** y **Do.** z\n", []string{"A"}); err != nil {
		t.Fatalf("a complete section fails: %v", err)
	}
}

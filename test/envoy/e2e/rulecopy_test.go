package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// limitSpec is a smaller limit for a test copy of a shipped rule: the
// rule keeps its name, keys, algorithm and mode; only its size changes.
type limitSpec struct {
	RPU  int
	Unit string
	// Burst replaces the limit's burst; 0 means RPU.
	Burst int
}

// withLimits returns a copy of files whose named limits (rate_limit or
// rate_limits entries of any file, matched by name) get the given sizes. A
// burst, where the limit has one, becomes the spec's Burst, else the new
// requests_per_unit, so a token bucket or GCRA admits exactly RPU at once
// unless the spec says otherwise; unit_multiplier is
// dropped. A name no file has fails t, so a renamed rule cannot leave a
// test limiting nothing.
func withLimits(t testing.TB, files map[string]string, specs map[string]limitSpec) map[string]string {
	t.Helper()
	out := map[string]string{}
	found := map[string]bool{}
	for name, data := range files {
		var doc map[string]any
		if err := yaml.Unmarshal([]byte(data), &doc); err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		changed := false
		var walk func(descs []any)
		walk = func(descs []any) {
			for _, d := range descs {
				dm, _ := d.(map[string]any)
				if dm == nil {
					continue
				}
				var limits []any
				if l, ok := dm["rate_limit"]; ok {
					limits = append(limits, l)
				}
				if ls, ok := dm["rate_limits"].([]any); ok {
					limits = append(limits, ls...)
				}
				for _, l := range limits {
					lm, _ := l.(map[string]any)
					lname, _ := lm["name"].(string)
					spec, ok := specs[lname]
					if !ok {
						continue
					}
					found[lname], changed = true, true
					lm["requests_per_unit"] = spec.RPU
					lm["unit"] = spec.Unit
					delete(lm, "unit_multiplier")
					if _, ok := lm["burst"]; ok {
						lm["burst"] = spec.RPU
						if spec.Burst > 0 {
							lm["burst"] = spec.Burst
						}
					}
				}
				if sub, ok := dm["descriptors"].([]any); ok {
					walk(sub)
				}
			}
		}
		descs, _ := doc["descriptors"].([]any)
		walk(descs)
		if !changed {
			out[name] = data
			continue
		}
		b, err := yaml.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = string(b)
	}
	for name := range specs {
		if !found[name] {
			t.Fatalf("no rule file has a limit named %q", name)
		}
	}
	return out
}

// decisionEntry is one descriptor of envoy-rls's debug "decision" log
// line: its entries ("key=value"), the rule that matched ("none" when
// nothing did) and its code.
type decisionEntry struct {
	Entries []string `json:"entries"`
	Rule    string   `json:"rule"`
	Code    string   `json:"code"`
}

// decisionLog returns the descriptors of every "decision" line envoy-rls
// logged (it runs with --log-level debug for them).
func (s *stack) decisionLog(t testing.TB) []decisionEntry {
	t.Helper()
	var out []decisionEntry
	sc := bufio.NewScanner(strings.NewReader(s.RLS.Logs.String()))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var line struct {
			Msg         string          `json:"msg"`
			Descriptors []decisionEntry `json:"descriptors"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "decision" {
			out = append(out, line.Descriptors...)
		}
	}
	return out
}

// rulesFor returns the rules the decision log names for descriptors made
// of exactly the given entries, each once.
func rulesFor(log []decisionEntry, entries ...string) []string {
	want := fmt.Sprint(entries)
	seen := map[string]bool{}
	var out []string
	for _, d := range log {
		if fmt.Sprint(d.Entries) == want && !seen[d.Rule] {
			seen[d.Rule] = true
			out = append(out, d.Rule)
		}
	}
	return out
}

// isUnlimitedRule reports whether rule, as the decision log names an
// unnamed rule ("<file>:<line>"), is a descriptor of the stack's rule
// files that says unlimited: true.
func (s *stack) isUnlimitedRule(t testing.TB, rule string) bool {
	t.Helper()
	file, lineNo, ok := strings.Cut(rule, ":")
	n, err := strconv.Atoi(lineNo)
	if !ok || err != nil || filepath.Dir(file) != s.RulesDir {
		return false
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	if n < 1 || n > len(lines) {
		return false
	}
	// The descriptor's lines: from its "- key" line to the next line
	// indented as much or less.
	first := lines[n-1]
	indent := len(first) - len(strings.TrimLeft(first, " "))
	for _, l := range lines[n:] {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if len(l)-len(strings.TrimLeft(l, " ")) <= indent {
			break
		}
		if strings.TrimSpace(l) == "unlimited: true" {
			return true
		}
	}
	return false
}

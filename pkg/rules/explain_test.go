package rules

import (
	"fmt"
	"strings"
	"testing"
)

func TestExplainCandidates(t *testing.T) {
	s := mustSnapshot(t, map[string]string{"test.yaml": matchConfig})
	tests := []struct {
		name    string
		entries []string
		// levels lists, per level, its candidates as "kind:value:line",
		// the chosen one first.
		levels [][]string
		reason string // substring; "" when a rule matches
	}{
		{name: "exact beats the wildcards and the key", entries: []string{"key2=foobar"},
			levels: [][]string{{"exact:foobar:19", "wildcard:foo*:13", "wildcard:f*:16", "key::22"}}},
		{name: "first wildcard beats a later one and the key", entries: []string{"key2=foo1"},
			levels: [][]string{{"wildcard:foo*:13", "wildcard:f*:16", "key::22"}}},
		{name: "key alone", entries: []string{"key2=bar"}, levels: [][]string{{"key::22"}}},
		{name: "nested", entries: []string{"key1=value1", "subkey1=x"},
			levels: [][]string{{"exact:value1:3", "key::8"}, {"key::6"}}},
		{name: "no match at level two", entries: []string{"key1=value1", "other=1"},
			levels: [][]string{{"exact:value1:3", "key::8"}, nil}, reason: "no descriptor matches"},
		{name: "deeper than the tree", entries: []string{"key2=bar", "x=y"},
			levels: [][]string{{"key::22"}}, reason: "more entries than the configured tree is deep"},
		{name: "placeholder without a limit", entries: []string{"key1=value1"},
			levels: [][]string{{"exact:value1:3", "key::8"}}, reason: "no rate_limit of its own"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex := s.Explain("test", entries(tt.entries...))
			if len(ex.Levels) != len(tt.levels) {
				t.Fatalf("levels = %d, want %d: %+v", len(ex.Levels), len(tt.levels), ex.Levels)
			}
			for i, lv := range ex.Levels {
				var got []string
				for j, c := range lv.Candidates {
					if c.Chosen != (j == 0) || c.File != "test.yaml" {
						t.Errorf("level %d candidate %d: chosen %v, file %q", i, j, c.Chosen, c.File)
					}
					got = append(got, fmt.Sprintf("%s:%s:%d", c.Kind, c.Value, c.Line))
				}
				if strings.Join(got, " ") != strings.Join(tt.levels[i], " ") {
					t.Errorf("level %d = %v, want %v", i, got, tt.levels[i])
				}
			}
			if tt.reason == "" && (ex.Rule == nil || ex.Reason != "") || !strings.Contains(ex.Reason, tt.reason) {
				t.Errorf("rule %v, reason %q; want reason containing %q", ex.Rule, ex.Reason, tt.reason)
			}
		})
	}
}

func TestExplainUnknownDomain(t *testing.T) {
	s := mustSnapshot(t, map[string]string{"test.yaml": matchConfig})
	if ex := s.Explain("nope", entries("a=b")); ex.Rule != nil || !strings.Contains(ex.Reason, `domain "nope" is not configured`) {
		t.Errorf("Explain(unknown domain) = %+v", ex)
	}
	var nilSnap *Snapshot
	if ex := nilSnap.Explain("d", entries("a=b")); ex.Rule != nil || ex.Reason == "" {
		t.Errorf("nil snapshot Explain = %+v", ex)
	}
}

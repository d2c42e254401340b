package rls

import (
	"strings"
	"testing"
)

// TestLegacyNames: the legacy headers can carry envoyproxy/ratelimit's
// names (LIMIT_LIMIT_HEADER and its siblings) with the same values.
func TestLegacyNames(t *testing.T) {
	names, err := ParseLegacyNames("RateLimit-Limit, RateLimit-Remaining,RateLimit-Reset")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newTestService(t, twoRules, func(c *Config) { c.Headers = HeaderOptions{Legacy: true, LegacyNames: names} })
	got := map[string]string{}
	for _, h := range call(t, s, request("d", desc("b=1"))).GetResponseHeadersToAdd() {
		got[h.GetKey()] = h.GetValue()
	}
	want := map[string]string{"RateLimit-Limit": "1", "RateLimit-Remaining": "0", "RateLimit-Reset": "60"}
	if len(got) != len(want) {
		t.Fatalf("headers %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("header %s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
}

func TestParseLegacyNamesErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"A,B", "three"},
		{"A,B,C,D", "three"},
		{"A,,C", `""`},
		{"A,B C,D", `"B C"`},
		{"A:x,B,C", `"A:x"`},
	} {
		if _, err := ParseLegacyNames(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseLegacyNames(%q) = %v, want an error containing %s", tc.in, err, tc.want)
		}
	}
}

package flagenv

import (
	"strings"
	"testing"
)

// TestTwins: a flag not given takes its twin, a flag given keeps its
// value, and a twin that does not parse names the variable and the flag.
func TestTwins(t *testing.T) {
	env := map[string]string{"ENVOY_RLS_REDIS_URL": "redis://r:6379", "ENVOY_RLS_LOG_LEVEL": "debug"}
	get := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	fs := NewFlagSet("serve")
	url := fs.String("redis-url", "", "")
	level := fs.String("log-level", "info", "")
	other := fs.String("config-dir", "/etc", "")
	if err := fs.Parse([]string{"--log-level=warn"}); err != nil {
		t.Fatal(err)
	}
	if err := ApplyTwins(fs, get); err != nil {
		t.Fatal(err)
	}
	if *url != "redis://r:6379" || *level != "warn" || *other != "/etc" {
		t.Errorf("redis-url %q, log-level %q, config-dir %q; want the twin, the command line, the default", *url, *level, *other)
	}
	for name, want := range map[string]bool{"redis-url": true, "log-level": true, "config-dir": false} {
		if got := Given(fs, get, name); got != want {
			t.Errorf("Given(%s) = %v, want %v", name, got, want)
		}
	}
	bad := NewFlagSet("check")
	bad.Int("hits", 0, "")
	err := ApplyTwins(bad, func(string) (string, bool) { return "many", true })
	if err == nil || !strings.Contains(err.Error(), "ENVOY_RLS_HITS") || !strings.Contains(err.Error(), "--hits") {
		t.Errorf("error %v, want one naming ENVOY_RLS_HITS and --hits", err)
	}
}

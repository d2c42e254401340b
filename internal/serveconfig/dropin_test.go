package serveconfig

import (
	"cmp"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	flag "github.com/spf13/pflag"

	"github.com/envoy-rls/envoy-rls/internal/dropin"
	"github.com/envoy-rls/envoy-rls/internal/flagenv"
	"github.com/envoy-rls/envoy-rls/pkg/memstore"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// parseEnv parses serve's flags args, then env as the process's
// environment when started as name.
func parseEnv(t *testing.T, name string, env map[string]string, args ...string) (*Settings, error) {
	t.Helper()
	cfg, fs := New("serve")
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	fs.VisitAll(func(f *flag.Flag) { // the ENVOY_RLS_* twins, as applyTwins reads them
		if v, ok := env[flagenv.Name(f.Name)]; ok && !f.Changed {
			if err := f.Value.Set(v); err != nil {
				t.Fatalf("%s=%q: %v", flagenv.Name(f.Name), v, err)
			}
		}
	})
	return cfg, cfg.applyEnv(fs, flagenv.MapEnv(env, name))
}

func TestDropInMode(t *testing.T) {
	ref := rules.FileLayout{Reference: true, DotFiles: true}
	tests := []struct {
		name      string
		invoked   string
		env       map[string]string
		args      []string
		on        bool
		algorithm string
		files     rules.FileLayout
		dir       string // --config-dir, when not the default
	}{
		{name: "envoy-rls's own", invoked: "envoy-rls", algorithm: "sliding_window"},
		{name: "started as ratelimit", invoked: "ratelimit", on: true, algorithm: "fixed_window", files: ref, dir: "/srv/runtime_data/current/config"},
		{name: "istio sample", invoked: "envoy-rls", env: map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true"},
			on: true, algorithm: "fixed_window", files: rules.FileLayout{Reference: true}, dir: "/data/ratelimit/config"},
		{name: "dotfiles read by default", invoked: "envoy-rls", env: map[string]string{"RUNTIME_APPDIRECTORY": "rules"},
			on: true, algorithm: "fixed_window", files: ref, dir: "/srv/runtime_data/current/rules"},
		{name: "our directory wins over RUNTIME_ROOT", invoked: "envoy-rls", env: map[string]string{"RUNTIME_ROOT": "/data"},
			args: []string{"--config-dir", "/etc/rules"}, algorithm: "sliding_window", dir: "/etc/rules"},
		{name: "off", invoked: "ratelimit", args: []string{"--drop-in=off"}, algorithm: "sliding_window"},
		{name: "off from the environment", invoked: "ratelimit", env: map[string]string{"ENVOY_RLS_DROP_IN": "off"}, algorithm: "sliding_window"},
		{name: "on", invoked: "envoy-rls", args: []string{"--drop-in=on"}, on: true, algorithm: "fixed_window", files: ref, dir: "/srv/runtime_data/current/config"},
		{name: "on, our directory", invoked: "envoy-rls", args: []string{"--drop-in=on", "--config-dir=/etc/rules"}, on: true, algorithm: "fixed_window", files: ref, dir: "/etc/rules"},
		{name: "algorithm given wins", invoked: "ratelimit", args: []string{"--default-algorithm=gcra"}, on: true, algorithm: "gcra", files: ref, dir: "/srv/runtime_data/current/config"},
		{name: "algorithm from our variable wins", invoked: "ratelimit", env: map[string]string{"ENVOY_RLS_DEFAULT_ALGORITHM": "token_bucket"},
			on: true, algorithm: "token_bucket", files: ref, dir: "/srv/runtime_data/current/config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseEnv(t, tt.invoked, tt.env, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.dropIn.On != tt.on || cfg.defaultAlgorithm != tt.algorithm || cfg.dropIn.Files != tt.files {
				t.Errorf("drop-in %v, algorithm %s, files %+v; want %v, %s, %+v", cfg.dropIn.On, cfg.defaultAlgorithm, cfg.dropIn.Files, tt.on, tt.algorithm, tt.files)
			}
			if dir := cmp.Or(tt.dir, "/etc/envoy-rls/config"); cfg.configDir != dir {
				t.Errorf("--config-dir %s, want %s", cfg.configDir, dir)
			}
			opts, err := cfg.RulesOptions()
			if err != nil {
				t.Fatal(err)
			}
			if opts.ZeroMissingRequestsPerUnit != tt.on || opts.Files != tt.files {
				t.Errorf("rules options %+v, want drop-in %v", opts, tt.on)
			}
		})
	}
	if _, err := parseEnv(t, "envoy-rls", nil, "--drop-in=maybe"); err == nil {
		t.Error("--drop-in=maybe accepted")
	}
	if _, err := parseEnv(t, "ratelimit", map[string]string{"RUNTIME_IGNOREDOTFILES": "sure"}); err == nil {
		t.Error("RUNTIME_IGNOREDOTFILES=sure accepted")
	}
}

// TestDropInDecisions is the trial: a rule of 5 a second, five
// requests at .85 s into a second and five more at .05 s into the next.
// envoyproxy/ratelimit's fixed windows admit all ten; so does drop-in
// mode, from a rule file named as a ConfigMap key in a subdirectory.
// envoy-rls's own default, a sliding window, denies the second five. The
// clock is the service's, set by the test: nothing depends on real time.
func TestDropInDecisions(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config", "team")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rule := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n"
	if err := os.WriteFile(filepath.Join(dir, "limits"), []byte(rule), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true"}
	tests := []struct {
		name     string
		invoked  string
		args     []string
		admitted int
	}{
		{"drop-in", "ratelimit", nil, 10},
		{"envoy-rls's own default", "ratelimit", []string{"--drop-in=off", "--config-dir", filepath.Dir(dir)}, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseEnv(t, tt.invoked, env, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			if !cfg.dropIn.On {
				// The own layout reads only *.yaml: give it the file so.
				if err := os.WriteFile(filepath.Join(cfg.configDir, "limits.yaml"), []byte(rule), 0o600); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.Remove(filepath.Join(cfg.configDir, "limits.yaml")) })
			}
			if got := countAdmitted(t, cfg); got != tt.admitted {
				t.Errorf("%d of 10 admitted, want %d", got, tt.admitted)
			}
		})
	}
}

// countAdmitted loads cfg's rules and runs the trial's ten requests
// through a service on the in-process store, on a clock it sets.
func countAdmitted(t *testing.T, cfg *Settings) int {
	t.Helper()
	opts, err := cfg.RulesOptions()
	if err != nil {
		t.Fatal(err)
	}
	snap, err := rules.LoadDir(cfg.configDir, opts)
	if err != nil {
		t.Fatalf("load %s: %v", cfg.configDir, err)
	}
	store, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	second := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := second
	svc, err := rls.New(rls.Config{
		Rules:            func() *rules.Snapshot { return snap },
		Backend:          store,
		DefaultAlgorithm: opts.DefaultAlgorithm,
		Now:              func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	req := &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}},
	}}
	admitted := 0
	for _, at := range []time.Duration{850 * time.Millisecond, time.Second + 50*time.Millisecond} {
		now = second.Add(at)
		for range 5 {
			resp, err := svc.ShouldRateLimit(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetOverallCode() == pb.RateLimitResponse_OK {
				admitted++
			}
		}
	}
	return admitted
}

// TestDropInCountsDeniedHits (issue 38, item 3): with only the
// reference's environment, drop-in mode counts denied hits (every limit
// that names no cost is a charge), as the reference does unless
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT is true; our own flag, or that
// variable, decides otherwise, and outside drop-in mode nothing changes.
func TestDropInCountsDeniedHits(t *testing.T) {
	tests := []struct {
		name    string
		invoked string
		env     map[string]string
		args    []string
		charges bool
	}{
		{name: "the reference's environment", invoked: "ratelimit", env: map[string]string{"REDIS_URL": "127.0.0.1:6379"}, charges: true},
		{name: "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true", invoked: "ratelimit", env: map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true"}},
		{name: "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false", invoked: "ratelimit", env: map[string]string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "false"}, charges: true},
		{name: "our flag wins", invoked: "ratelimit", args: []string{"--count-denied-hits=false"}},
		{name: "our variable wins", invoked: "ratelimit", env: map[string]string{"ENVOY_RLS_COUNT_DENIED_HITS": "false"}},
		{name: "envoy-rls's own", invoked: "envoy-rls"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseEnv(t, tt.invoked, tt.env, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			opts, err := cfg.RulesOptions()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.countDeniedHits != tt.charges || opts.DefaultCharge != tt.charges {
				t.Errorf("--count-denied-hits %v, rules' default charge %v; want %v", cfg.countDeniedHits, opts.DefaultCharge, tt.charges)
			}
		})
	}
}

// TestDebugAddrBeyondLoopback: the reference's DEBUG_HOST and DEBUG_PORT
// bind the debug listener, console included, on every interface unless
// DEBUG_HOST says otherwise, as the reference binds its debug port; a
// start-up warning names the address and how to keep it on loopback.
func TestDebugAddrBeyondLoopback(t *testing.T) {
	tests := []struct {
		name    string
		invoked string
		env     map[string]string
		args    []string
		want    string // the warning's detail holds it; "" for no warning
	}{
		{name: "drop-in, DEBUG_PORT", invoked: "ratelimit", env: map[string]string{"DEBUG_PORT": "9170"},
			want: "listening on 0.0.0.0:9170, as envoyproxy/ratelimit binds its debug port; whoever reaches it reads the console: keep it on loopback with DEBUG_HOST=127.0.0.1 or --debug-addr 127.0.0.1:9170"},
		{name: "DEBUG_HOST on a pod address", invoked: "envoy-rls", env: map[string]string{"DEBUG_HOST": "10.0.0.7"}, want: "listening on 10.0.0.7:6070"},
		{name: "DEBUG_HOST loopback", invoked: "ratelimit", env: map[string]string{"DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": "9170"}},
		{name: "DEBUG_HOST localhost", invoked: "ratelimit", env: map[string]string{"DEBUG_HOST": "localhost", "DEBUG_PORT": "9170"}},
		{name: "DEBUG_HOST ::1", invoked: "ratelimit", env: map[string]string{"DEBUG_HOST": "::1"}},
		{name: "our flag wins and is the operator's choice", invoked: "ratelimit", env: map[string]string{"DEBUG_PORT": "9170"}, args: []string{"--debug-addr", "127.0.0.1:9170"}},
		{name: "our variable wins", invoked: "ratelimit", env: map[string]string{"DEBUG_PORT": "9170", "ENVOY_RLS_DEBUG_ADDR": "0.0.0.0:9170"}},
		{name: "drop-in, no DEBUG_*: loopback default", invoked: "ratelimit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseEnv(t, tt.invoked, tt.env, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			var got []dropin.Note
			for _, n := range cfg.refNotes {
				if n.Msg == dropin.DebugExposedMsg {
					got = append(got, n)
				}
			}
			switch {
			case tt.want == "" && len(got) > 0:
				t.Errorf("debug listener on %s: warned %+v, want no warning", cfg.http.debugAddr, got)
			case tt.want != "" && len(got) != 1:
				t.Errorf("debug listener on %s: %d warnings, want one; notes %+v", cfg.http.debugAddr, len(got), cfg.refNotes)
			case tt.want != "" && (!got[0].Warn || !strings.Contains(got[0].Detail, tt.want)):
				t.Errorf("warning %+v, want a warning whose detail holds %q", got[0], tt.want)
			}
		})
	}
}

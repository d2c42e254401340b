package cli

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/flagenv"
)

// TestCommandLineMistakes: arguments a command does not take are errors
// (exit 2, one line saying what to do) and never start a server.
func TestCommandLineMistakes(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"other command's flag before check", []string{"--addr", "h:1", "check"}, `--domain and at least one -d are required`},
		{"serve's flags, then a command", []string{"serve", "--config-dir", "x", "validate"}, `the command "validate" comes first`},
		{"serve stray argument", []string{"serve", "stray-arg"}, `unexpected argument "stray-arg": envoy-rls serve takes no arguments`},
		{"default command stray argument", []string{"--config-dir", "x", "stray-arg"}, `unknown command "stray-arg"`},
		{"validate two directories", []string{"validate", "a", "b"}, `unexpected argument "b": envoy-rls validate takes at most one argument`},
		{"check stray argument", []string{"check", "--domain", "d", "-d", "k=v", "extra"}, `unexpected argument "extra": envoy-rls check takes no arguments`},
		{"override stray argument", []string{"override", "list", "extra"}, `unexpected argument "extra"`},
		{"version stray argument", []string{"version", "extra"}, `unexpected argument "extra"`},
		{"single-dash unknown flag", []string{"-colour", "blue"}, `unknown shorthand flag: 'c' in -colour`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := usageError(t, tt.args); !strings.Contains(got, tt.want) {
				t.Errorf("stderr %q: want it to contain %q", got, tt.want)
			}
		})
	}
}

// usageError runs args, which must exit 2 with one line on stderr, and
// returns that line.
func usageError(t *testing.T, args []string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 2 {
		t.Fatalf("%q: exit %d, want 2; stderr %q", args, code, stderr.String())
	}
	got := strings.TrimSuffix(stderr.String(), "\n")
	if strings.Contains(got, "\n") {
		t.Errorf("%q: stderr %q, want one line", args, got)
	}
	return got
}

// runOK runs args, which must exit 0, and returns stdout.
func runOK(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("%q: exit %d, want 0; stderr %q", args, code, stderr.String())
	}
	return stdout.String()
}

// TestFlagsAnywhere: flags go before or after arguments, before or after
// the command, with one dash or two (Go's flag package took one, and
// command lines written for it keep working).
func TestFlagsAnywhere(t *testing.T) {
	good := t.TempDir()
	writeRule(t, good, "a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")
	for _, args := range [][]string{
		{"validate", good, "--default-algorithm", "fixed_window"},
		{"validate", "--default-algorithm", "fixed_window", good},
		{"validate", "--default-algorithm=fixed_window", good},
		{"validate", "-default-algorithm", "fixed_window", good},
		{"validate", "-default-algorithm=fixed_window", good},
		{"--default-algorithm", "fixed_window", "validate", good},
		{"--config-dir", good, "validate"},
		{"validate", "--config-dir", good},
	} {
		if out := runOK(t, args...); !strings.Contains(out, "1 domain") {
			t.Errorf("%q: stdout %q, want the summary of the directory", args, out)
		}
	}
}

// TestVersionFlag: --version and version print the same line.
func TestVersionFlag(t *testing.T) {
	want := "envoy-rls " + testVersion + "\n"
	for _, args := range [][]string{{"--version"}, {"version"}, {"-version"}} {
		if got := runOK(t, args...); got != want {
			t.Errorf("%q: %q, want %q", args, got, want)
		}
	}
}

// TestCompletion: a completion script for each shell operators use.
func TestCompletion(t *testing.T) {
	for shell, want := range map[string]string{
		"bash": "__start_envoy-rls",
		"zsh":  "#compdef envoy-rls",
		"fish": "complete -c envoy-rls",
	} {
		if out := runOK(t, "completion", shell); !strings.Contains(out, want) {
			t.Errorf("completion %s: output lacks %q:\n%.300s", shell, want, out)
		}
	}
	// Flags complete too: cobra's __complete answers with serve's flags.
	if out := runOK(t, "__complete", "serve", "--redis-u"); !strings.Contains(out, "--redis-url") {
		t.Errorf("__complete serve --redis-u: %q, want --redis-url", out)
	}
}

// TestEveryCommandHasExamples: each command's help shows examples, and
// each flag its ENVOY_RLS_* twin.
func TestEveryCommandHasExamples(t *testing.T) {
	for _, cmd := range [][]string{{}, {"serve"}, {"validate"}, {"check"}, {"explain"}, {"inspect"},
		{"override"}, {"override", "set"}, {"override", "list"}, {"override", "clear"}, {"top"}, {"version"}} {
		out := runOK(t, append(cmd, "--help")...)
		if !strings.Contains(out, "Examples:\n  ") {
			t.Errorf("%q --help has no examples:\n%s", cmd, out)
		}
		// The root's help lists the commands and leaves serve's flags to
		// serve --help (TestTopLevelHelp).
		noFlags := len(cmd) == 0 || len(cmd) == 1 && (cmd[0] == "version" || cmd[0] == "override")
		if !noFlags {
			if !strings.Contains(out, "[env ENVOY_RLS_") {
				t.Errorf("%q --help names no ENVOY_RLS_* twin:\n%s", cmd, out)
			}
		}
	}
}

// TestHelpNamesTwins: serve's help names each flag's ENVOY_RLS_* twin and
// the reference's variables where they set it.
func TestHelpNamesTwins(t *testing.T) {
	out := runOK(t, "serve", "--help")
	for _, want := range []string{
		"--config-dir string",
		"[env ENVOY_RLS_CONFIG_DIR; envoyproxy/ratelimit: RUNTIME_ROOT, RUNTIME_SUBDIRECTORY, RUNTIME_APPDIRECTORY]",
		"[env ENVOY_RLS_REDIS_URL; envoyproxy/ratelimit: REDIS_SOCKET_TYPE, REDIS_TYPE, REDIS_URL",
		"[env ENVOY_RLS_SHADOW_MODE; envoyproxy/ratelimit: SHADOW_MODE]",
		"[env ENVOY_RLS_PPROF]",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("serve --help lacks %q", want)
		}
	}
	var lines int
	_, flags, _ := strings.Cut(out, "\nFlags:\n")
	for _, l := range strings.Split(flags, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "--") && !strings.Contains(l, "--help") {
			lines++
			if !strings.Contains(l, "[env ENVOY_RLS_") {
				t.Errorf("flag line without its twin: %q", l)
			}
		}
	}
	if lines < 50 {
		t.Errorf("serve --help lists %d flags, want serve's (50+)", lines)
	}
}

// TestServeWithoutRuleDirectory: serve with no flags, where no rule
// directory is, says how to point it at one.
func TestServeWithoutRuleDirectory(t *testing.T) {
	var stderr bytes.Buffer
	missing := filepath.Join(t.TempDir(), "none")
	t.Setenv("ENVOY_RLS_CONFIG_DIR", missing)
	if code := serve(flagenv.ProcessEnv("envoy-rls"), nil, &stderr); code != 1 {
		t.Fatalf("exit %d, want 1; stderr %q", code, stderr.String())
	}
	for _, want := range []string{"no rule directory at " + missing, "--config-dir examples/config"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr %q lacks %q", stderr.String(), want)
		}
	}
}

// TestDescriptorFlagNames: -d and its long names --descriptor and --d.
func TestDescriptorFlagNames(t *testing.T) {
	dir := t.TempDir()
	writeRule(t, dir, "a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")
	for _, flag := range []string{"-d", "--descriptor", "--d"} {
		out := runOK(t, "explain", "--config-dir", dir, "--domain", "a", flag, "k=v")
		if !strings.Contains(out, "k=v") {
			t.Errorf("%s: %q, want the descriptor explained", flag, out)
		}
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
}

// serve runs `envoy-rls serve args`, its standard output discarded.
func serve(env flagenv.Env, args []string, stderr io.Writer) int {
	return runIn(env, append([]string{"serve"}, args...), io.Discard, stderr)
}

// run runs the command line args as the binary would, started as
// envoy-rls in this process's environment.
func run(args []string, stdout, stderr io.Writer) int {
	return runIn(flagenv.ProcessEnv("envoy-rls"), args, stdout, stderr)
}

// testVersion is the version the tests' command lines run as, a build's
// without -ldflags.
const testVersion = "dev"

// runIn runs the command line args in env.
func runIn(env flagenv.Env, args []string, stdout, stderr io.Writer) int {
	return Run(Process{Version: testVersion, Env: env, Stdout: stdout, Stderr: stderr}, args)
}

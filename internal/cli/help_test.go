package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/flagenv"
)

// TestTopLevelHelp asks for help before any command: every command is
// listed, and serve's ninety flags are left to `serve -h`, which the help
// names.
func TestTopLevelHelp(t *testing.T) {
	for _, arg := range []string{"--help", "-help", "-h", "help"} {
		t.Run(arg, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run([]string{arg}, &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d, want 0; stderr %q", code, stderr.String())
			}
			out := stdout.String()
			want := []string{"Commands:", "envoy-rls serve -h", "--version", "ENVOY_RLS_REDIS_URL"}
			for _, name := range commands {
				want = append(want, "\n  "+name+" ")
			}
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Errorf("help lacks %q:\n%s", w, out)
				}
			}
			for _, flag := range []string{"--grpc-addr", "--redis-url string", "--grpc-max-connection-age"} {
				if strings.Contains(out, flag) {
					t.Errorf("help lists serve's flag %s; want them left to serve -h:\n%s", flag, out)
				}
			}
		})
	}
}

// TestCLIDocListsEveryCommand: docs/cli.md's table of commands has a row
// for every command envoy-rls has.
func TestCLIDocListsEveryCommand(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	root := (&cli{version: testVersion, env: flagenv.ProcessEnv("envoy-rls")}).rootCommand()
	for _, cmd := range root.Commands() {
		if cmd.Name() == "help" {
			continue
		}
		if !strings.Contains(string(doc), "\n| `"+cmd.Name()) {
			t.Errorf("docs/cli.md's table has no row for %q", cmd.Name())
		}
	}
}

// TestFlagMistakeIsOneLine gives each command a flag it does not have: the
// answer is one line naming the flag, not the whole flag list.
func TestFlagMistakeIsOneLine(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"default command", []string{"--colour", "blue"}},
		{"serve", []string{"serve", "--colour", "blue"}},
		{"validate", []string{"validate", "--colour", "blue"}},
		{"check", []string{"check", "--colour", "blue"}},
		{"bad value", []string{"serve", "--grpc-max-connection-age", "soon"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := usageError(t, tt.args)
			name := strings.TrimLeft(tt.args[len(tt.args)-2], "-")
			if !strings.Contains(got, name) || !strings.Contains(got, "-h lists the flags") {
				t.Errorf("stderr %q: want one line naming %s and pointing at -h", got, name)
			}
		})
	}
}

// TestCommandHelpStillListsFlags keeps -h after a command useful: it asked
// for the flags, so it gets them, on stdout as kubectl and helm print them.
func TestCommandHelpStillListsFlags(t *testing.T) {
	for _, args := range [][]string{{"serve", "-h"}, {"serve", "--help"}, {"help", "serve"}, {"serve", "--config-dir", "x", "-h"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 0 {
			t.Fatalf("%q: exit %d, want 0", args, code)
		}
		if !strings.Contains(stdout.String(), "--grpc-addr") {
			t.Errorf("%q lacks the flags:\n%s", args, stdout.String())
		}
	}
}

// TestStartErrorLines runs serve into start failures: each problem must be
// one plain line, not a JSON log entry.
func TestStartErrorLines(t *testing.T) {
	bad := t.TempDir()
	writeRule(t, bad, "a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: mins, requests_per_unit: 1}\n")
	writeRule(t, bad, "b.yaml", "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: hours, requests_per_unit: 1}\n")
	tests := []struct {
		name  string
		args  []string
		lines int
		want  string
	}{
		{"missing dir", []string{"--config-dir", filepath.Join(bad, "missing")}, 1, "--config-dir"},
		{"two bad files", []string{"--config-dir", bad}, 2, `unknown unit`},
		{"bad age", []string{"--config-dir", bad, "--grpc-keepalive-time", "0s"}, 1, "--grpc-keepalive-time"},
		{"empty socket path", []string{"--config-dir", logRulesDir(t), "--grpc-addr", "unix://", "--http-addr", "127.0.0.1:0", "--debug-addr", ""}, 1, "names no socket path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			if code := serve(flagenv.ProcessEnv("envoy-rls"), tt.args, &stderr); code != 1 {
				t.Fatalf("exit %d, want 1; stderr %q", code, stderr.String())
			}
			lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			if len(lines) != tt.lines {
				t.Fatalf("%d lines, want %d:\n%s", len(lines), tt.lines, stderr.String())
			}
			for _, l := range lines {
				if !strings.HasPrefix(l, "envoy-rls serve: cannot start: ") || strings.HasPrefix(l, "{") {
					t.Errorf("line %q: want a plain \"envoy-rls serve: cannot start: …\" line", l)
				}
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("stderr lacks %q:\n%s", tt.want, stderr.String())
			}
		})
	}
}

// writeRule writes one rule file into dir.
func writeRule(t *testing.T, dir, name, data string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

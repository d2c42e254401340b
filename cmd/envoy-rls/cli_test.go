package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestCommandLineMistakes: flags before a command, and arguments a
// command does not take, are errors (exit 2, one line saying what to do)
// and never start a server.
func TestCommandLineMistakes(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"flag before validate", []string{"--config-dir", "x", "validate", "y"}, `the command "validate" comes first, then its flags: envoy-rls validate [flags]`},
		{"boolean flag before validate", []string{"--shadow-mode", "validate"}, `the command "validate" comes first`},
		{"other command's flag before check", []string{"--addr", "h:1", "check"}, `the command "check" comes first`},
		{"flag with value before inspect", []string{"--redis-url=redis://h", "inspect"}, `the command "inspect" comes first`},
		{"serve's flags, then a command", []string{"serve", "--config-dir", "x", "validate"}, `the command "validate" comes first`},
		{"serve stray argument", []string{"serve", "stray-arg"}, `unexpected argument "stray-arg": envoy-rls serve takes no arguments`},
		{"default command stray argument", []string{"--config-dir", "x", "stray-arg"}, `unexpected argument "stray-arg"`},
		{"validate two directories", []string{"validate", "a", "b"}, `unexpected argument "b": envoy-rls validate takes at most one argument`},
		{"check stray argument", []string{"check", "--domain", "d", "-d", "k=v", "extra"}, `unexpected argument "extra": envoy-rls check takes no arguments`},
		{"override stray argument", []string{"override", "list", "extra"}, `unexpected argument "extra"`},
		{"version stray argument", []string{"version", "extra"}, `unexpected argument "extra"`},
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

// TestCommandAfterFlags: a flag's value is not taken for a command.
func TestCommandAfterFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--config-dir", "version"}, ""},
		{[]string{"--config-dir", "version", "validate"}, "validate"},
		{[]string{"--shadow-mode", "--", "validate"}, ""},
		{[]string{"-shadow-mode=true", "explain"}, "explain"},
		{[]string{"--unknown", "value", "override"}, "override"},
		{[]string{"--config-dir", "x", "dir", "validate"}, ""},
	}
	for _, tt := range tests {
		if got := commandAfterFlags(tt.args); got != tt.want {
			t.Errorf("commandAfterFlags(%q) = %q, want %q", tt.args, got, tt.want)
		}
	}
}

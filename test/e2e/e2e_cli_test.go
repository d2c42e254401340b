package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/childproc"
)

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := childproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(port)
}

// TestCheckCommand runs `envoy-rls check` against a server: exit 0 on OK,
// 1 on OVER_LIMIT, 2 on any error, with one line per descriptor.
func TestCheckCommand(t *testing.T) {
	t.Parallel()
	s := startShop(t)
	type want struct {
		code   int
		stdout []string // regexps, each must match a line
		stderr string   // substring
	}
	tests := []struct {
		name string
		env  []string
		args []string
		want want
	}{
		{"ok", nil, []string{"--domain", "shop", "-d", "plan=free"},
			want{0, []string{`^overall: OK$`, `^descriptor 0 \(plan=free\): OK limit=2/MINUTEx30 remaining=1 reset=\d`}, ""}},
		{"two descriptors in order", nil, []string{"--domain", "shop", "-d", "user=cli,plan=none", "-d", "client=cli"},
			want{0, []string{`^overall: OK$`, `^descriptor 0 \(user=cli,plan=none\): OK$`, `^descriptor 1 \(client=cli\): OK limit=5/HOUR name=per_client remaining=4 reset=`}, ""}},
		{"last before the limit", nil, []string{"--domain", "shop", "-d", "plan=free"},
			want{0, []string{`^descriptor 0 \(plan=free\): OK limit=2/MINUTEx30 remaining=0 `}, ""}},
		{"over the limit", nil, []string{"--domain", "shop", "-d", "plan=free"},
			want{1, []string{`^overall: OVER_LIMIT$`, `^descriptor 0 \(plan=free\): OVER_LIMIT limit=2/MINUTEx30 remaining=0 reset=\d`}, ""}},
		{"hits", nil, []string{"--domain", "shop", "--hits", "4", "-d", "client=hits"},
			want{0, []string{`^descriptor 0 \(client=hits\): OK limit=5/HOUR name=per_client remaining=1 `}, ""}},
		{"hits over", nil, []string{"--domain", "shop", "--hits", "2", "-d", "client=hits"},
			want{1, []string{`^descriptor 0 \(client=hits\): OVER_LIMIT .* remaining=1 `}, ""}},
		// client=hits has 1 left of 5: a check passes, a refund of 2
		// gives them back, a check-only request never consumes.
		{"check only", nil, []string{"--domain", "shop", "--check-only", "-d", "client=hits"},
			want{0, []string{`^descriptor 0 \(client=hits\): OK limit=5/HOUR name=per_client remaining=1 `}, ""}},
		{"refund", nil, []string{"--domain", "shop", "--hits", "2", "--refund", "-d", "client=hits"},
			want{0, []string{`^descriptor 0 \(client=hits\): OK limit=5/HOUR name=per_client remaining=3 `}, ""}},
		{"check only, twice", nil, []string{"--domain", "shop", "--check-only", "-d", "client=hits"},
			want{0, []string{`^descriptor 0 \(client=hits\): OK .* remaining=3 `}, ""}},
		{"check only and refund", nil, []string{"--domain", "shop", "--check-only", "--refund", "-d", "client=hits"},
			want{2, nil, "--check-only and --refund"}},
		{"domain from the environment", []string{"ENVOY_RLS_DOMAIN=shop"}, []string{"-d", "client=env"},
			want{0, []string{`^descriptor 0 \(client=env\): OK limit=5/HOUR`}, ""}},
		// A typo in the domain is allowed, as Envoy would be told, with a
		// note; --require-limit makes it an exit code for scripts.
		{"unknown domain: a note", nil, []string{"--domain", "shpo", "-d", "plan=free"},
			want{0, []string{`^overall: OK$`, `^descriptor 0 \(plan=free\): OK$`}, `note: the server has no domain "shpo": no limit applies`}},
		{"known domain, no rule matches: a note", nil, []string{"--domain", "shop", "-d", "nosuchkey=x"},
			want{0, []string{`^overall: OK$`}, `note: no limit applies to this request: no rule of domain "shop" matches these descriptors`}},
		{"unknown domain, --require-limit", nil, []string{"--require-limit", "--domain", "shpo", "-d", "plan=free"},
			want{3, []string{`^overall: OK$`}, `no domain "shpo"`}},
		{"a limit applies, --require-limit", nil, []string{"--require-limit", "--domain", "shop", "-d", "client=required"},
			want{0, []string{`^descriptor 0 \(client=required\): OK limit=5/HOUR`}, ""}},
		{"no domain", nil, []string{"-d", "plan=free"}, want{2, nil, "--domain and at least one -d are required"}},
		{"no descriptor", nil, []string{"--domain", "shop"}, want{2, nil, "--domain and at least one -d are required"}},
		{"bad descriptor", nil, []string{"--domain", "shop", "-d", "plan"}, want{2, nil, `entry "plan": want key=value`}},
		{"invalid request", nil, []string{"--domain", "shop", "-d", strings.Repeat("k", 300) + "=v"},
			want{2, nil, "descriptors[0].entries[0].key: 300 bytes exceeds the limit of 256"}},
	}
	for _, tt := range tests { // in order: they share the server's counters
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"check", "--addr", s.GRPCAddr}, tt.args...)
			stdout, stderr, code := runCLI(t, tt.env, args...)
			if code != tt.want.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.want.code, stdout, stderr)
			}
			lines := strings.Split(strings.TrimSpace(stdout), "\n")
			for _, re := range tt.want.stdout {
				if !slicesMatch(lines, regexp.MustCompile(re)) {
					t.Errorf("no stdout line matches %q; stdout:\n%s", re, stdout)
				}
			}
			if !strings.Contains(stderr, tt.want.stderr) {
				t.Errorf("stderr %q, want it to contain %q", stderr, tt.want.stderr)
			}
			if tt.want.stderr == "" && strings.Contains(stderr, "note:") {
				t.Errorf("stderr %q: a note where a limit applied", stderr)
			}
		})
	}

	// A server that is not there is an error, not a decision.
	_, stderr, code := runCLI(t, nil, "check", "--addr", freeAddr(t), "--timeout", "5s", "--domain", "shop", "-d", "plan=free")
	if code != 2 || !strings.Contains(stderr, "envoy-rls check:") {
		t.Errorf("unreachable server: exit %d, stderr %q; want 2 with an error", code, stderr)
	}
	s.stop()
}

func slicesMatch(lines []string, re *regexp.Regexp) bool {
	for _, l := range lines {
		if re.MatchString(l) {
			return true
		}
	}
	return false
}

// TestValidateCommand runs `envoy-rls validate` on a directory with three
// different mistakes in three files, on good directories, and on misuse.
func TestValidateCommand(t *testing.T) {
	t.Parallel()
	bad := rulesDir(t, map[string]string{
		"a.yaml": "domain: a\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: mins\n      requests_per_unit: 5\n",
		"b.yaml": "domain: b\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      algorithm: token_bucket\n      burst: 0\n",
		"c.yml":  "domain: c\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: x\n    colour: blue\n",
	})
	stdout, stderr, code := runCLI(t, nil, "validate", bad)
	if code != 1 {
		t.Fatalf("validate bad dir: exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{
		filepath.Join(bad, "a.yaml") + ":5: descriptors[0].rate_limit.unit: unknown unit \"mins\"",
		filepath.Join(bad, "b.yaml") + ":8: descriptors[0].rate_limit.burst: 0 is out of range",
		filepath.Join(bad, "c.yml") + ":6: descriptors[1].colour: unknown field",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("validate output lacks %q; stderr:\n%s", want, stderr)
		}
	}

	good := rulesDir(t, map[string]string{"shop.yaml": shopRules, "api.yml": apiRules(3)})
	stdout, stderr, code = runCLI(t, nil, "validate", good)
	if code != 0 || strings.TrimSpace(stdout) != "2 domains, 4 rules, 4 limits OK" {
		t.Errorf("validate good dir: exit %d, stdout %q, stderr %q; want 0 and \"2 domains, 4 rules, 4 limits OK\"", code, stdout, stderr)
	}

	// One file validates on its own; a broken one names its failing line.
	if stdout, stderr, code := runCLI(t, nil, "validate", filepath.Join(good, "shop.yaml")); code != 0 || !strings.HasSuffix(strings.TrimSpace(stdout), "OK") {
		t.Errorf("validate FILE: exit %d, stdout %q, stderr %q; want 0 and OK", code, stdout, stderr)
	}
	indent := rulesDir(t, map[string]string{"i.yaml": "domain: i\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n     requests_per_unit: 5\n"})
	if _, stderr, code := runCLI(t, nil, "validate", filepath.Join(indent, "i.yaml")); code != 1 || !strings.Contains(stderr, "i.yaml:6: invalid YAML") {
		t.Errorf("validate FILE with an indentation error on line 6: exit %d, stderr %q; want 1 and i.yaml:6", code, stderr)
	}

	// The shipped examples validate, as `make run` serves them.
	examples, err := filepath.Abs(filepath.Join("..", "..", "examples", "config"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(examples); err != nil {
		t.Fatal(err)
	}
	if stdout, stderr, code := runCLI(t, nil, "validate", examples); code != 0 || !strings.HasSuffix(strings.TrimSpace(stdout), "OK") {
		t.Errorf("validate examples/config: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}

	misuse := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"empty dir", []string{"validate", t.TempDir()}, 1, "no rule files"},
		{"missing dir", []string{"validate", filepath.Join(t.TempDir(), "nope")}, 2, "no rule file or directory at "},
		{"no dir: --config-dir's default, with serve's hint", []string{"validate"}, 2, "no rule directory at /etc/envoy-rls/config; point validate at one"},
		{"two dirs", []string{"validate", good, good}, 2, "validate takes at most one argument"},
		{"bad default algorithm", []string{"validate", "--default-algorithm", "leaky", good}, 2, "--default-algorithm"},
	}
	for _, m := range misuse {
		_, stderr, code := runCLI(t, nil, m.args...)
		if code != m.code || !strings.Contains(stderr, m.want) {
			t.Errorf("%s: exit %d, stderr %q; want %d containing %q", m.name, code, stderr, m.code, m.want)
		}
	}
}

// TestVersionAndUsage covers the small commands.
func TestVersionAndUsage(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := runCLI(t, nil, "version")
	want := "envoy-rls " + testVersion
	if testVersion == "" {
		want = "envoy-rls "
	}
	if code != 0 || !strings.HasPrefix(stdout, want) || strings.Count(stdout, "\n") != 1 {
		t.Errorf("version: exit %d, stdout %q, stderr %q; want 0 and %q", code, stdout, stderr, want)
	}
	stdout, _, code = runCLI(t, nil, "help")
	if code != 0 || !strings.Contains(stdout, "validate") || !strings.Contains(stdout, "ENVOY_RLS_REDIS_URL") {
		t.Errorf("help: exit %d, stdout %q", code, stdout)
	}
	_, stderr, code = runCLI(t, nil, "frobnicate")
	if code != 2 || !strings.Contains(stderr, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: exit %d, stderr %q; want 2", code, stderr)
	}
	stdout, _, code = runCLI(t, nil, "serve", "-h")
	if code != 0 || !strings.Contains(stdout, "--redis-url") || !strings.Contains(stdout, "ENVOY_RLS_REDIS_URL") {
		t.Errorf("serve -h: exit %d, stdout %q; want 0 and the flags with their environment twins", code, stdout)
	}
}

// TestCLIConventions drives the built binary the way kubectl and helm are
// driven: --version, flags after arguments and before the command, one dash
// or two, completion scripts, and help on stdout naming the twins.
func TestCLIConventions(t *testing.T) {
	t.Parallel()
	dir, err := filepath.Abs(filepath.Join("..", "..", "examples", "config"))
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"validate", dir, "--default-algorithm", "fixed_window"},
		{"--default-algorithm=fixed_window", "validate", dir},
		{"validate", "-default-algorithm", "fixed_window", dir},
	} {
		if stdout, stderr, code := runCLI(t, nil, args...); code != 0 || !strings.Contains(stdout, "OK") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want the directory validated", args, code, stdout, stderr)
		}
	}
	version, _, _ := runCLI(t, nil, "version")
	if stdout, _, code := runCLI(t, nil, "--version"); code != 0 || stdout != version || !strings.HasPrefix(stdout, "envoy-rls "+testVersion) {
		t.Errorf("--version: exit %d, %q; want %q, as version prints", code, stdout, version)
	}
	for shell, want := range map[string]string{"bash": "__start_envoy-rls", "zsh": "#compdef envoy-rls", "fish": "complete -c envoy-rls"} {
		if stdout, _, code := runCLI(t, nil, "completion", shell); code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("completion %s: exit %d, no %q", shell, code, want)
		}
	}
	stdout, _, code := runCLI(t, nil, "inspect", "--help")
	if code != 0 || !strings.Contains(stdout, "[env ENVOY_RLS_REDIS_URL; envoyproxy/ratelimit: ") || !strings.Contains(stdout, "Examples:") {
		t.Errorf("inspect --help: exit %d, stdout %q; want the twins and examples", code, stdout)
	}
}

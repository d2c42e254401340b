package docs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"
	"github.com/envoy-rls/envoy-rls/internal/testkit/envoytest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/rlsproc"
)

// Bounds that only keep a broken build from hanging the test.
const (
	blockTimeout = 60 * time.Second
	readyTimeout = 30 * time.Second
)

// binPath is the envoy-rls TestMain builds; repoRoot the checkout.
var binPath, repoRoot string

// TestMain builds envoy-rls once for the package (rlsproc.Main removes it
// afterwards). The examples' Redis comes from redistest.Standalone, which
// fails the test, never skips it, when redis-server is missing.
func TestMain(m *testing.M) {
	rlsproc.Main(m, &binPath, func() (err error) {
		repoRoot, err = filepath.Abs("../..")
		return err
	})
}

// example is one runnable block of a document.
type example struct {
	file   string // relative to the repository
	line   int    // of the opening fence
	env    string // "", "serve", "redis" or "envoy"
	script string
	// setup are the document's earlier export blocks (see isSetup), run
	// before script as a reader's shell would have run them.
	setup string
	// recipe is the envoy-rls rule file and Envoy virtual hosts of a
	// block that says recipe=NAME (env "recipe").
	recipe recipe
	// want is the output the document shows; hasWant is false when it
	// shows none, and the block must then exit 0.
	want    string
	hasWant bool
}

func (e example) String() string { return fmt.Sprintf("%s:%d", e.file, e.line) }

// shellLangs are the fence languages of command blocks: each must say
// run or norun.
var shellLangs = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true}

// docFiles are the documents whose examples run: README.md and docs/*.md.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(repoRoot, "README.md")}, files...)
}

// fence is one fenced block: its info string's words and its lines.
type fence struct {
	line   int
	indent string // of the opening fence, taken off every line
	info   []string
	lines  []string
	// next is the fence right after this one (only blank lines between),
	// or nil.
	next *fence
}

// parseFences returns the fenced blocks of a Markdown document.
func parseFences(doc string) []*fence {
	var out []*fence
	var cur *fence
	var blankSince bool // only blank lines since the last fence closed
	for i, l := range strings.Split(doc, "\n") {
		trimmed := strings.TrimSpace(l)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur = &fence{line: i + 1, info: strings.Fields(strings.TrimPrefix(trimmed, "```")),
				indent: l[:len(l)-len(strings.TrimLeft(l, " "))]}
			if blankSince && len(out) > 0 {
				out[len(out)-1].next = cur
			}
		case cur != nil && trimmed == "```":
			out = append(out, cur)
			cur, blankSince = nil, true
		case cur != nil:
			cur.lines = append(cur.lines, strings.TrimPrefix(l, cur.indent))
		default:
			blankSince = blankSince && trimmed == ""
		}
	}
	return out
}

// has reports whether the fence's info string has word after its language.
func (f *fence) has(word string) bool {
	return len(f.info) > 1 && slices.Contains(f.info[1:], word)
}

// examples returns the runnable blocks of the documents, failing t for a
// shell block marked neither run nor norun.
func examples(t *testing.T) []example {
	t.Helper()
	var out []example
	for _, path := range docFiles(t) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot, path)
		var setup []string
		recipes := recipesOf(t, rel, parseFences(string(data)))
		for _, f := range parseFences(string(data)) {
			if len(f.info) == 0 || !shellLangs[f.info[0]] {
				continue
			}
			run, norun := f.has("run"), f.has("norun")
			if run == norun {
				t.Errorf("%s:%d: a %s block must say run (the docs test runs it) or norun (it cannot run here: kubectl, helm install, docker)", rel, f.line, f.info[0])
				continue
			}
			if norun {
				continue
			}
			e := example{file: rel, line: f.line, setup: strings.Join(setup, "\n")}
			for _, env := range []string{"serve", "redis", "envoy"} {
				if f.has(env) {
					e.env = env
				}
			}
			if name := f.recipeName(); name != "" {
				r := recipes[name]
				if r.rules == "" || r.virtualHosts == "" {
					t.Errorf("%s:%d: recipe %q needs a yaml recipe=%s block with its rule file (domain: ...) and one with its Envoy virtual_hosts", rel, f.line, name, name)
					continue
				}
				e.env, e.recipe = "recipe", r
			}
			if f.info[0] == "console" {
				e.script, e.want = splitConsole(f.lines)
				e.hasWant = strings.TrimSpace(e.want) != ""
			} else {
				e.script = strings.Join(f.lines, "\n")
				if n := f.next; n != nil && n.has("output") {
					e.want, e.hasWant = strings.Join(n.lines, "\n"), true
				}
			}
			if isSetup(e.script) {
				setup = append(setup, e.script)
			}
			out = append(out, e)
		}
	}
	return out
}

// isSetup reports whether a block only exports variables (every line an
// export or a comment), such as a document's `export PATH="$PWD/bin:$PATH"`:
// a reader runs it once, and every later block of the document runs after
// it.
func isSetup(script string) bool {
	n := 0
	for _, l := range strings.Split(script, "\n") {
		switch l = strings.TrimSpace(l); {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "export "):
			n++
		default:
			return false
		}
	}
	return n > 0
}

// splitConsole splits a console block into its commands ($ lines and
// their \ continuations) and the output lines after them.
func splitConsole(lines []string) (script, want string) {
	var cmds, outs []string
	cont := false
	for _, l := range lines {
		switch {
		case cont:
			cmds = append(cmds, l)
		case strings.HasPrefix(l, "$ "):
			cmds = append(cmds, strings.TrimPrefix(l, "$ "))
		default:
			outs = append(outs, l)
			continue
		}
		cont = strings.HasSuffix(strings.TrimSpace(l), `\`)
	}
	return strings.Join(cmds, "\n"), strings.Join(outs, "\n")
}

// TestDocExamples runs every runnable block and compares its output with
// the one the document shows.
func TestDocExamples(t *testing.T) {
	exs := examples(t)
	// The documents' first steps are all marked: a test that found
	// nothing to run would pass while checking nothing.
	if len(exs) < 10 {
		t.Fatalf("%d runnable examples in README.md and docs/, want at least 10", len(exs))
	}
	for _, e := range exs {
		t.Run(e.String(), func(t *testing.T) {
			t.Parallel()
			runExample(t, e)
		})
	}
}

// docPorts are the ports the documents show, mapped to free ones here:
// envoy-rls's gRPC, HTTP and debug ports, Redis's, and the listeners and
// admin port of examples/envoy/envoy.yaml.
var docPorts = []string{"8081", "8080", "6070", "6379", "10000", "10001", "9901"}

// runExample runs e in a workspace of its own and checks its output.
func runExample(t *testing.T, e example) {
	ws := workspace(t)
	ports := map[string]string{}
	free, err := childproc.FreePorts(len(docPorts))
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range docPorts {
		ports[p] = strconv.Itoa(free[i])
	}
	if e.env == "redis" {
		ports["6379"] = strconv.Itoa(redistest.Standalone(t).Port)
	}
	switch e.env {
	case "serve", "redis", "envoy":
		startServer(t, ws, "examples/config", ports, e.env == "redis")
	case "recipe":
		if err := os.Mkdir(filepath.Join(ws, "recipe"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, "recipe", "rules.yaml"), []byte(e.recipe.rules), 0o600); err != nil {
			t.Fatal(err)
		}
		startServer(t, ws, "recipe", ports, false)
	}
	switch e.env {
	case "envoy":
		startEnvoy(t, ports, "")
	case "recipe":
		startEnvoy(t, ports, e.recipe.virtualHosts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), blockTimeout)
	defer cancel()
	out, err := newcomerShell(ctx, ws, mapPorts(e.setup+"\n"+e.script, ports)).CombinedOutput()
	if !e.hasWant {
		if err != nil {
			t.Fatalf("%v\n%s\n--- output:\n%s", err, e.script, out)
		}
		return
	}
	if msg := compareOutput(mapPorts(e.want, ports), string(out)); msg != "" {
		t.Errorf("the output differs from the document's (%s):\n--- commands:\n%s\n--- document:\n%s\n--- got:\n%s", msg, e.script, e.want, out)
	}
}

// newcomerShell is bash running script in ws with the PATH a newcomer has
// in a fresh clone: the system's, without any directory that holds an
// envoy-rls or an envoy (a developer's own bin/ on PATH would let a bare
// `envoy-rls` in a document pass here and fail for the reader). The
// documents call bin/envoy-rls and bin/envoy, or export PATH once in a block
// of their own (isSetup).
func newcomerShell(ctx context.Context, ws, script string) *exec.Cmd {
	var dirs []string
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if d == "" || hasExecutable(d, "envoy-rls") || hasExecutable(d, "envoy") {
			continue
		}
		dirs = append(dirs, d)
	}
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = ws
	cmd.Env = append(os.Environ(), "PATH="+strings.Join(dirs, string(os.PathListSeparator)))
	return cmd
}

func hasExecutable(dir, name string) bool {
	st, err := os.Stat(filepath.Join(dir, name))
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// portRE finds a documented port after a colon, or as a port_value in
// an Envoy bootstrap.
var portRE = regexp.MustCompile(`(:|port_value: )(` + strings.Join(docPorts, "|") + `)\b`)

// mapPorts rewrites the documents' ports to this run's.
func mapPorts(s string, ports map[string]string) string {
	return portRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := portRE.FindStringSubmatch(m)
		return sub[1] + ports[sub[2]]
	})
}

// workspace is a directory that looks like a checkout after make build and
// make envoy: the repository's examples (linked), bin/envoy-rls,
// bin/envoy, and an admin token.
func workspace(t *testing.T) string {
	t.Helper()
	ws := t.TempDir()
	for _, name := range []string{"examples", "envoy-config", "charts", "deploy", "manifests", "docs"} {
		if err := os.Symlink(filepath.Join(repoRoot, name), filepath.Join(ws, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(ws, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binPath, filepath.Join(ws, "bin", "envoy-rls")); err != nil {
		t.Fatal(err)
	}
	// bin/envoy as make envoy links it; without Envoy, a block that calls
	// it fails with envoytest's message in its output.
	if envoy, err := envoytest.Binary(); err == nil {
		if err := os.Symlink(envoy, filepath.Join(ws, "bin", "envoy")); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ws, "admin-token"), []byte("docs-example-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return ws
}

// startServer starts envoy-rls serve in ws on the rules of configDir and
// the mapped ports, as make run does plus the admin token, and waits until
// it is ready.
func startServer(t *testing.T, ws, configDir string, ports map[string]string, withRedis bool) {
	t.Helper()
	args := []string{"serve", "--config-dir", configDir,
		"--grpc-addr", "127.0.0.1:" + ports["8081"], "--http-addr", "127.0.0.1:" + ports["8080"],
		"--debug-addr", "127.0.0.1:" + ports["6070"], "--admin-token-file", "admin-token", "--log-format", "console"}
	if withRedis {
		args = append(args, "--redis-url", "redis://127.0.0.1:"+ports["6379"])
	}
	var logs bytes.Buffer
	srv := exec.Command(binPath, args...)
	srv.Dir = ws
	srv.Stdout, srv.Stderr = &logs, &logs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	t.Cleanup(func() {
		_ = srv.Process.Kill()
		<-done
	})
	deadline := time.Now().Add(readyTimeout)
	for {
		resp, err := http.Get("http://127.0.0.1:" + ports["8080"] + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case err := <-done:
			t.Fatalf("envoy-rls serve exited: %v\n%s", err, &logs)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("envoy-rls serve not ready within %v:\n%s", readyTimeout, &logs)
		}
	}
}

// startEnvoy runs a real Envoy on examples/envoy/envoy.yaml, its ports
// mapped to this run's, in front of the server startServer started; with
// virtualHosts (a recipe's), its ingress listener's virtual hosts are
// those instead.
func startEnvoy(t *testing.T, ports map[string]string, virtualHosts string) {
	t.Helper()
	bootstrap, err := os.ReadFile(filepath.Join(repoRoot, "examples", "envoy", "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if virtualHosts != "" {
		if bootstrap, err = withVirtualHosts(bootstrap, virtualHosts); err != nil {
			t.Fatal(err)
		}
	}
	envoytest.Start(t, []byte(mapPorts(string(bootstrap), ports)), envoytest.Options{Name: "examples-envoy"})
}

// timingRE matches the timing values, which differ from run to run and
// are not compared: RFC 3339 times, and Go or protobuf durations.
var timingRE = regexp.MustCompile(`\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)|\b\d+(\.\d+)?(ns|us|µs|ms|s|m|h)(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))*\b`)

const anyTiming = "<timing>"

// compareOutput compares got with the document's want, tolerating only
// the order of JSON fields and timing values; "" when they agree, else
// what differs. A line "..." in want stands for any number of lines.
func compareOutput(want, got string) string {
	w, g := cleanLines(want), cleanLines(got)
	if wv, ok := jsonValues(strings.Join(w, "\n")); ok {
		if gv, ok := jsonValues(strings.Join(g, "\n")); ok {
			if !reflect.DeepEqual(wv, gv) {
				return "JSON differs"
			}
			return ""
		}
	}
	return matchLines(w, g)
}

// matchLines matches want's lines to got's, "..." skipping any number.
func matchLines(want, got []string) string {
	if len(want) == 0 {
		if len(got) == 0 {
			return ""
		}
		return fmt.Sprintf("unexpected line %q", got[0])
	}
	if want[0] == "..." {
		for i := 0; i <= len(got); i++ {
			if matchLines(want[1:], got[i:]) == "" {
				return ""
			}
		}
		return fmt.Sprintf("no lines after ... match %q", want[1:])
	}
	if len(got) == 0 {
		return fmt.Sprintf("missing line %q", want[0])
	}
	if !lineEqual(want[0], got[0]) {
		return fmt.Sprintf("line %q, want %q", got[0], want[0])
	}
	return matchLines(want[1:], got[1:])
}

// lineEqual compares one line: as JSON when both are, else as text with
// timing values masked.
func lineEqual(want, got string) bool {
	if wv, ok := jsonValues(want); ok && strings.HasPrefix(strings.TrimSpace(want), "{") {
		gv, ok := jsonValues(got)
		return ok && reflect.DeepEqual(wv, gv)
	}
	return timingRE.ReplaceAllString(want, anyTiming) == timingRE.ReplaceAllString(got, anyTiming)
}

// cleanLines splits s into lines without trailing spaces or blank lines
// at either end.
func cleanLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		out = append(out, strings.TrimRight(l, " \t\r"))
	}
	for len(out) > 0 && out[0] == "" {
		out = out[1:]
	}
	for len(out) > 0 && out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return out
}

// jsonValues decodes s as one or more JSON values, with each timing
// value masked; ok is false when s is not only JSON.
func jsonValues(s string) ([]any, bool) {
	if strings.TrimSpace(s) == "" {
		return nil, false
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var out []any
	for {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return out, true
		}
		if err != nil {
			return nil, false
		}
		out = append(out, maskJSON(v))
	}
}

// maskJSON masks the timing values in v's strings.
func maskJSON(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = maskJSON(e)
		}
	case []any:
		for i, e := range x {
			x[i] = maskJSON(e)
		}
	case string:
		return timingRE.ReplaceAllString(x, anyTiming)
	}
	return v
}

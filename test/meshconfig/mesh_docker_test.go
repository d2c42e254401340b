package meshconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"
)

// dockerInstruction is one Dockerfile instruction with its continuation
// lines joined.
type dockerInstruction struct {
	line int
	cmd  string // upper case
	args string
}

// parseDockerfile splits a Dockerfile into instructions, dropping comments
// and joining lines continued with a backslash.
func parseDockerfile(data []byte) []dockerInstruction {
	var (
		out  []dockerInstruction
		cur  strings.Builder
		from int
	)
	for i, raw := range strings.Split(string(data), "\n") {
		line := strings.TrimSpace(raw)
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if cur.Len() > 0 && strings.HasPrefix(line, "#") {
			continue
		}
		if cur.Len() == 0 {
			from = i + 1
		}
		if strings.HasSuffix(line, "\\") {
			cur.WriteString(strings.TrimSuffix(line, "\\"))
			cur.WriteByte(' ')
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, dockerInstruction{line: from, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)})
		cur.Reset()
	}
	return out
}

// versionVar is the variable -X main.version=… sets; without it the linker
// silently ignores the flag.
var versionVar = regexp.MustCompile(`(?m)^\s*(var\s+)?version\s*(string\s*)?=\s*"`)

// checkDockerfile checks the image build: a Go builder stage, a static
// non-root distroless runtime, CGO off, -trimpath, the version stamp, the
// two ports and an exec-form ENTRYPOINT. root is the repository root;
// ignore is the .dockerignore, to check that every COPY source reaches the
// build context.
func checkDockerfile(data []byte, root string, ignore *dockerIgnore) error {
	var errs []error
	ins := parseDockerfile(data)
	args := map[string]string{}
	var froms []string
	var run, expose, user, entrypoint string
	refCommand := false
	for _, in := range ins {
		switch in.cmd {
		case "ARG":
			if k, v, ok := strings.Cut(in.args, "="); ok {
				args[k] = v
			}
		case "FROM":
			img := in.args
			for k, v := range args {
				img = strings.ReplaceAll(img, "${"+k+"}", v)
			}
			froms = append(froms, img)
		case "RUN":
			if strings.Contains(in.args, "go build") {
				run = in.args
			}
		case "EXPOSE":
			expose = in.args
		case "USER":
			user = in.args
		case "ENTRYPOINT":
			entrypoint = in.args
		case "COPY":
			fields := strings.Fields(in.args)
			if len(fields) == 3 && fields[0] == "--from=build" && fields[1] == "/out/envoy-rls" && fields[2] == "/bin/ratelimit" {
				refCommand = true
			}
			if strings.HasPrefix(fields[0], "--from=") || len(fields) < 2 {
				continue
			}
			for _, src := range fields[:len(fields)-1] {
				if src == "." || strings.HasPrefix(src, "--") {
					continue
				}
				clean := path.Clean(src)
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(clean))); err != nil {
					errs = append(errs, fmt.Errorf("Dockerfile:%d: COPY source %s: %w", in.line, src, err))
				} else if ignore.excluded(clean) {
					errs = append(errs, fmt.Errorf("Dockerfile:%d: COPY source %s is excluded by .dockerignore", in.line, src))
				}
			}
		}
	}
	switch {
	case len(froms) < 2:
		errs = append(errs, fmt.Errorf("Dockerfile: %d stages, want a builder and a runtime stage", len(froms)))
	default:
		if !strings.HasPrefix(froms[0], "golang:1.26") {
			errs = append(errs, fmt.Errorf("Dockerfile: builder is %q, want golang:1.26", froms[0]))
		}
		if last := froms[len(froms)-1]; last != "gcr.io/distroless/static:nonroot" {
			errs = append(errs, fmt.Errorf("Dockerfile: runtime is %q, want gcr.io/distroless/static:nonroot", last))
		}
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-X main.version=${VERSION}", "./cmd/envoy-rls"} {
		if !strings.Contains(run, want) {
			errs = append(errs, fmt.Errorf("Dockerfile: the go build RUN lacks %q", want))
		}
	}
	if f := strings.Fields(expose); len(f) != 2 || f[0] != "8081" || f[1] != "8080" {
		errs = append(errs, fmt.Errorf("Dockerfile: EXPOSE %q, want 8081 8080", expose))
	}
	uid, _, _ := strings.Cut(user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		errs = append(errs, fmt.Errorf("Dockerfile: USER %q must be a numeric non-root uid (Kubernetes' runAsNonRoot cannot verify a name)", user))
	}
	var ep []string
	if err := json.Unmarshal([]byte(entrypoint), &ep); err != nil || len(ep) == 0 {
		errs = append(errs, fmt.Errorf("Dockerfile: ENTRYPOINT %q must be in exec form (a JSON array) so signals reach envoy-rls", entrypoint))
	}
	if !refCommand {
		// Deployments of envoyproxy/ratelimit (Istio's sample) run
		// command: ["/bin/ratelimit"]; the image must answer there.
		errs = append(errs, errors.New("Dockerfile: no COPY --from=build /out/envoy-rls /bin/ratelimit (envoyproxy/ratelimit deployments run /bin/ratelimit)"))
	}
	// The build copies the whole context, so the module and the command
	// must reach it.
	for _, p := range []string{"go.mod", "go.sum", "cmd/envoy-rls/main.go"} {
		if ignore.excluded(p) {
			errs = append(errs, fmt.Errorf(".dockerignore excludes %s, which the build needs", p))
		}
	}
	return errors.Join(errs...)
}

// dockerIgnore evaluates .dockerignore patterns as Docker does: the last
// matching pattern wins, "!" re-includes, a pattern matching a directory
// covers everything below it, and "**" spans directories.
type dockerIgnore struct {
	rules []ignoreRule
}

type ignoreRule struct {
	re     *regexp.Regexp
	negate bool
}

func parseDockerIgnore(data []byte) (*dockerIgnore, error) {
	d := &dockerIgnore{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		negate := strings.HasPrefix(line, "!")
		pat := path.Clean(strings.TrimPrefix(strings.TrimPrefix(line, "!"), "/"))
		var b strings.Builder
		b.WriteString("^")
		for j := 0; j < len(pat); j++ {
			switch c := pat[j]; {
			case strings.HasPrefix(pat[j:], "**/"):
				b.WriteString("(.*/)?")
				j += 2
			case strings.HasPrefix(pat[j:], "**"):
				b.WriteString(".*")
				j++
			case c == '*':
				b.WriteString("[^/]*")
			case c == '?':
				b.WriteString("[^/]")
			default:
				b.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
		b.WriteString("$")
		re, err := regexp.Compile(b.String())
		if err != nil {
			return nil, fmt.Errorf(".dockerignore:%d: %w", i+1, err)
		}
		d.rules = append(d.rules, ignoreRule{re: re, negate: negate})
	}
	return d, nil
}

// excluded reports whether the context path p (slash-separated, relative)
// is left out of the build context.
func (d *dockerIgnore) excluded(p string) bool {
	out := false
	for _, r := range d.rules {
		for q := p; q != "." && q != "/"; q = path.Dir(q) {
			if r.re.MatchString(q) {
				out = !r.negate
				break
			}
		}
	}
	return out
}

func TestDockerfile(t *testing.T) {
	root := childproc.Root()
	ignore, err := parseDockerIgnore(childproc.ReadRepoFile(t, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	if err := checkDockerfile(childproc.ReadRepoFile(t, "Dockerfile"), root, ignore); err != nil {
		t.Fatal(err)
	}
	var stamped bool
	for _, f := range repoGlob(t, "cmd/envoy-rls/*.go") {
		if !strings.HasSuffix(f, "_test.go") && versionVar.Match(childproc.ReadRepoFile(t, f)) {
			stamped = true
		}
	}
	if !stamped {
		t.Error("cmd/envoy-rls declares no `version` string variable for -X main.version to set")
	}
}

func TestDockerIgnore(t *testing.T) {
	ignore, err := parseDockerIgnore(childproc.ReadRepoFile(t, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path     string
		excluded bool
	}{
		{"go.mod", false},
		{"go.sum", false},
		{"cmd/envoy-rls/main.go", false},
		{"pkg/rules/parse.go", false},
		{"internal/testkit/redistest/redistest.go", false},
		{"examples/config/edge.yaml", false},
		{".git/HEAD", true},
		{"envoy-rls", true},
		{"manifests/istio/deployment.yaml", true},
		{"docs/deploying.md", true},
		{"pkg/rules/parse_test.go", true},
		{"pkg/rules/testdata/bad.yaml", true},
	} {
		if got := ignore.excluded(tc.path); got != tc.excluded {
			t.Errorf("excluded(%q) = %v, want %v", tc.path, got, tc.excluded)
		}
	}
}

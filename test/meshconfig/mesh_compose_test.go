package meshconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"

	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/envoy-rls/envoy-rls/internal/testkit/envoytest"
	"github.com/envoy-rls/envoy-rls/test/envoy/checks"
)

const (
	composeRel   = "test/e2e/docker-compose.yaml"
	e2eScriptRel = "test/e2e/run.sh"
)

// composeFile is the subset of the Compose specification the e2e setup
// uses; decoding is strict, so a misspelt key fails.
type composeFile struct {
	Name     string                     `json:"name"`
	Services map[string]*composeService `json:"services"`
}

type composeService struct {
	Image string `json:"image,omitempty"`
	Build *struct {
		Context    string            `json:"context"`
		Dockerfile string            `json:"dockerfile,omitempty"`
		Args       map[string]string `json:"args,omitempty"`
	} `json:"build,omitempty"`
	Command     []string          `json:"command,omitempty"`
	Environment map[string]string `json:"environment,omitempty"`
	Volumes     []string          `json:"volumes,omitempty"`
	Ports       []string          `json:"ports,omitempty"`
	DependsOn   dependsOn         `json:"depends_on,omitempty"`
	Healthcheck *struct {
		Test     []string `json:"test"`
		Interval string   `json:"interval,omitempty"`
		Timeout  string   `json:"timeout,omitempty"`
		Retries  int      `json:"retries,omitempty"`
	} `json:"healthcheck,omitempty"`
}

// dependsOn accepts both Compose forms: a list of services, or a map of
// service to {condition}.
type dependsOn map[string]string

var dependsConditions = map[string]bool{"service_started": true, "service_healthy": true, "service_completed_successfully": true}

func (d *dependsOn) UnmarshalJSON(b []byte) error {
	var list []string
	if err := json.Unmarshal(b, &list); err == nil {
		*d = dependsOn{}
		for _, s := range list {
			(*d)[s] = "service_started"
		}
		return nil
	}
	var m map[string]struct {
		Condition string `json:"condition"`
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return fmt.Errorf("depends_on: want a list of services or a map of service to {condition}: %w", err)
	}
	*d = dependsOn{}
	for s, c := range m {
		if !dependsConditions[c.Condition] {
			return fmt.Errorf("depends_on.%s.condition: unsupported value %q", s, c.Condition)
		}
		(*d)[s] = c.Condition
	}
	return nil
}

// parseCompose decodes a compose file strictly.
func parseCompose(data []byte) (*composeFile, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", composeRel, err)
	}
	var c composeFile
	strict, err := kjson.UnmarshalStrict(js, &c)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", composeRel, err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("%s: %w", composeRel, errors.Join(strict...))
	}
	return &c, nil
}

// pinnedImage matches images with an explicit tag other than "latest".
var pinnedImage = regexp.MustCompile(`^[a-z0-9./-]+:[A-Za-z0-9._-]+$`)

// checkCompose checks the e2e stack: the four services, the envoy-rls build
// from the repository's Dockerfile, host paths that exist, pinned images,
// loopback-only published ports, and that the Envoy config it mounts dials
// services and ports the stack has. root is the repository root.
func checkCompose(c *composeFile, root string, envoyYAML []byte) error {
	var errs []error
	dir := path.Dir(composeRel)
	for _, name := range []string{"envoy", "envoy-rls", "redis", "echo"} {
		if c.Services[name] == nil {
			errs = append(errs, fmt.Errorf("%s: service %q is missing", composeRel, name))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	rls := c.Services["envoy-rls"]
	switch {
	case rls.Build == nil:
		errs = append(errs, fmt.Errorf("%s: envoy-rls must be built from the repository (build:)", composeRel))
	case path.Clean(path.Join(dir, rls.Build.Context)) != ".":
		errs = append(errs, fmt.Errorf("%s: envoy-rls build.context %q is not the repository root", composeRel, rls.Build.Context))
	default:
		df := rls.Build.Dockerfile
		if df == "" {
			df = "Dockerfile"
		}
		if _, err := os.Stat(filepath.Join(root, df)); err != nil {
			errs = append(errs, fmt.Errorf("%s: envoy-rls build.dockerfile: %w", composeRel, err))
		}
	}
	for name, s := range c.Services {
		where := fmt.Sprintf("%s: service %q", composeRel, name)
		if s.Build == nil && !pinnedImage.MatchString(s.Image) {
			errs = append(errs, fmt.Errorf("%s: image %q must name a fixed tag", where, s.Image))
		}
		if strings.HasSuffix(s.Image, ":latest") {
			errs = append(errs, fmt.Errorf("%s: image %q: pin a version, not latest", where, s.Image))
		}
		for dep := range s.DependsOn {
			if c.Services[dep] == nil {
				errs = append(errs, fmt.Errorf("%s: depends_on names unknown service %q", where, dep))
			}
			if s.DependsOn[dep] == "service_healthy" && c.Services[dep] != nil && c.Services[dep].Healthcheck == nil {
				errs = append(errs, fmt.Errorf("%s: waits for %q to be healthy, but it has no healthcheck", where, dep))
			}
		}
		for _, v := range s.Volumes {
			host, _, ok := strings.Cut(v, ":")
			if !ok || !strings.HasPrefix(host, ".") {
				continue // named volume
			}
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(path.Join(dir, host)))); err != nil {
				errs = append(errs, fmt.Errorf("%s: volume %q: %w", where, v, err))
			}
		}
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				errs = append(errs, fmt.Errorf("%s: port %q must bind 127.0.0.1 only", where, p))
			}
		}
	}
	errs = append(errs, checkComposeEnvoy(c, envoyYAML)...)
	if u := rls.Environment["ENVOY_RLS_REDIS_URL"]; u != "" {
		pu, err := url.Parse(u)
		if err != nil || pu.Hostname() != "redis" || pu.Port() != "6379" || c.Services["redis"] == nil {
			errs = append(errs, fmt.Errorf("%s: ENVOY_RLS_REDIS_URL %q must point at the redis service on 6379", composeRel, u))
		}
	} else {
		errs = append(errs, fmt.Errorf("%s: envoy-rls has no ENVOY_RLS_REDIS_URL, so the e2e would not exercise Redis", composeRel))
	}
	return errors.Join(errs...)
}

// checkComposeEnvoy checks that the envoy service mounts envoy-config's
// bootstrap where its command reads it, and that every cluster endpoint in
// that bootstrap is a compose service on the port it listens on.
func checkComposeEnvoy(c *composeFile, envoyYAML []byte) []error {
	var errs []error
	env := c.Services["envoy"]
	cfgPath := ""
	for i, a := range env.Command {
		if a == "-c" && i+1 < len(env.Command) {
			cfgPath = env.Command[i+1]
		}
	}
	mounted := false
	for _, v := range env.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && path.Clean(path.Join(path.Dir(composeRel), parts[0])) == "envoy-config/envoy.yaml" && parts[1] == cfgPath {
			mounted = true
		}
	}
	if !mounted {
		errs = append(errs, fmt.Errorf("%s: service envoy must mount envoy-config/envoy.yaml at the path of its -c flag (%q)", composeRel, cfgPath))
	}
	// The compose stack runs the Envoy the native tests run.
	if want := "envoyproxy/envoy:v" + envoytest.Version; env.Image != want {
		errs = append(errs, fmt.Errorf("%s: service envoy runs %q, want %q (the Envoy of internal/testkit/envoytest and the Makefile's ENVOY_VERSION)", composeRel, env.Image, want))
	}
	b, _, err := loadBootstrap("envoy-config/envoy.yaml", envoyYAML)
	if err != nil {
		return append(errs, err)
	}
	listens := map[string]uint32{"envoy-rls": 8081}
	if a := c.Services["envoy-rls"].Environment["ENVOY_RLS_GRPC_ADDR"]; a != "" {
		_, p, _ := net.SplitHostPort(a)
		n, _ := strconv.Atoi(p)
		listens["envoy-rls"] = uint32(n)
	}
	for _, a := range c.Services["echo"].Command {
		if p, ok := strings.CutPrefix(a, "-listen=:"); ok {
			n, _ := strconv.Atoi(p)
			listens["echo"] = uint32(n)
		}
	}
	for _, cl := range b.GetStaticResources().GetClusters() {
		for _, ep := range cl.GetLoadAssignment().GetEndpoints() {
			for _, lb := range ep.GetLbEndpoints() {
				if lb.GetEndpoint().GetAddress().GetPipe() != nil {
					continue // a Unix socket is no compose service (see envoy_rls_uds)
				}
				sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
				want, ok := listens[sa.GetAddress()]
				switch {
				case c.Services[sa.GetAddress()] == nil:
					errs = append(errs, fmt.Errorf("envoy-config/envoy.yaml: cluster %q dials %q, which is not a service of %s", cl.GetName(), sa.GetAddress(), composeRel))
				case ok && want != sa.GetPortValue():
					errs = append(errs, fmt.Errorf("envoy-config/envoy.yaml: cluster %q dials %s:%d, but that service listens on %d", cl.GetName(), sa.GetAddress(), sa.GetPortValue(), want))
				}
			}
		}
	}
	return errs
}

// scriptURL matches the loopback URLs the e2e script talks to.
var scriptURL = regexp.MustCompile(`http://127\.0\.0\.1:(\d+)`)

func TestComposeFileParses(t *testing.T) {
	c, err := parseCompose(childproc.ReadRepoFile(t, composeRel))
	if err != nil {
		t.Fatal(err)
	}
	if err := checkCompose(c, childproc.Root(), childproc.ReadRepoFile(t, "envoy-config/envoy.yaml")); err != nil {
		t.Fatal(err)
	}
	// Every port the script uses must be published by the stack.
	published := map[string]bool{}
	for _, s := range c.Services {
		for _, p := range s.Ports {
			parts := strings.Split(p, ":")
			if len(parts) == 3 {
				published[parts[1]] = true
			}
		}
	}
	ports := scriptURL.FindAllStringSubmatch(string(childproc.ReadRepoFile(t, e2eScriptRel)), -1)
	if len(ports) == 0 {
		t.Fatalf("%s talks to no http://127.0.0.1 URL", e2eScriptRel)
	}
	for _, m := range ports {
		if !published[m[1]] {
			t.Errorf("%s uses port %s, which %s does not publish", e2eScriptRel, m[1], composeRel)
		}
	}
}

// TestE2EScriptRunsTheSharedChecks: run.sh checks the compose stack with
// the list the native Envoy tests run (test/envoy/checks, through
// envoy-checks), every phase of it, and keeps no request checks of its own.
func TestE2EScriptRunsTheSharedChecks(t *testing.T) {
	script := string(childproc.ReadRepoFile(t, e2eScriptRel))
	if !strings.Contains(script, "go run ./test/envoy/checks/cmd/envoy-checks") {
		t.Errorf("%s does not run test/envoy/checks/cmd/envoy-checks", e2eScriptRel)
	}
	for name := range checks.Phases {
		if !regexp.MustCompile(`(?m)^if envoy_checks ` + regexp.QuoteMeta(name) + `; then$`).MatchString(script) {
			t.Errorf("%s does not run the shared checks' phase %s (if envoy_checks %s; then)", e2eScriptRel, name, name)
		}
	}
	if strings.Contains(script, "-X POST") || strings.Contains(script, "/api/login") {
		t.Errorf("%s sends requests of its own; add them to test/envoy/checks, so the native run checks them too", e2eScriptRel)
	}
}

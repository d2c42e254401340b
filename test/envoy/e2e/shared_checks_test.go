package e2e

import (
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"

	"sigs.k8s.io/yaml"
)

// composeEnv returns the environment test/e2e/docker-compose.yaml gives
// envoy-rls, but for the Redis URL (the native stack has its own Redis),
// so the native run serves with the compose stack's settings.
func composeEnv(t testing.TB) []string {
	t.Helper()
	var c struct {
		Services map[string]struct {
			Environment map[string]string `json:"environment"`
		} `json:"services"`
	}
	if err := yaml.Unmarshal(childproc.ReadRepoFile(t, "test/e2e/docker-compose.yaml"), &c); err != nil {
		t.Fatalf("test/e2e/docker-compose.yaml: %v", err)
	}
	svc, ok := c.Services["envoy-rls"]
	if !ok || len(svc.Environment) == 0 {
		t.Fatal("test/e2e/docker-compose.yaml: service envoy-rls has no environment map")
	}
	var env []string
	for k, v := range svc.Environment {
		if k != "ENVOY_RLS_REDIS_URL" {
			env = append(env, k+"="+v)
		}
	}
	sort.Strings(env)
	return env
}

// TestSharedChecks is the native starter of the checks test/e2e/run.sh
// runs against the docker-compose stack (package test/envoy/checks): the
// same command, envoy-checks, against Envoy, envoy-rls and an upstream on
// loopback, with envoy-rls configured as compose configures it. Phase up
// with everything running, phase rls-stopped after envoy-rls is killed.
func TestSharedChecks(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "envoy-checks")
	build := exec.Command("go", "build", "-o", bin, "./test/envoy/checks/cmd/envoy-checks")
	build.Dir = repoPath(".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build envoy-checks: %v\n%s", err, out)
	}
	env := composeEnv(t)
	t.Logf("envoy-rls environment from the compose file: %v", env)
	for _, st := range stores {
		t.Run(string(st), func(t *testing.T) {
			s := startStack(t, stackOpts{Store: st, Env: env})
			runChecks := func(phase string) {
				t.Helper()
				cmd := exec.Command(bin, "--phase", phase, "--envoy", s.URL,
					"--admin", s.Envoy.AdminURL, "--rls", "http://"+s.RLS.HTTPAddr)
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Errorf("envoy-checks --phase %s: %v\n%s", phase, err, out)
					return
				}
				if !strings.Contains(string(out), "ok   - ") || strings.Contains(string(out), "FAIL") {
					t.Errorf("envoy-checks --phase %s passed without passing a check:\n%s", phase, out)
				}
				t.Logf("envoy-checks --phase %s:\n%s", phase, out)
			}
			runChecks("up")
			s.RLS.Kill()
			runChecks("rls-stopped")
		})
	}
}

// Package rlqs runs envoy-rls as a Rate Limit Quota Service behind real
// Envoys (1.40, internal/testkit/envoytest): Envoys running the shipped
// examples/rlqs/envoy.yaml (addresses moved to loopback, one instance name
// each) in front of real upstreams, pointing at envoy-rls replicas (the
// built binary) that share one real Redis. probe_test.go pins down what
// Envoy's rate_limit_quota filter itself does.
package rlqs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"

	"github.com/envoy-rls/envoy-rls/internal/testkit/envoytest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/rlsproc"
)

// binPath is the envoy-rls binary TestMain built.
var binPath string

func TestMain(m *testing.M) {
	rlsproc.Main(m, &binPath, envoytest.Installed)
}

// reportInterval is Envoy 1.40's fixed RLQS reporting interval.
const reportInterval = 5 * time.Second

// exampleInstance is the instance name examples/rlqs/envoy.yaml gives
// its one Envoy; each test Envoy gets its own in its place.
const exampleInstance = "value: edge-1"

// countingUpstream is a real HTTP server behind one Envoy that records
// when each request reached it.
type countingUpstream = envoytest.Upstream

func startUpstream(t *testing.T) *countingUpstream { return envoytest.StartUpstream(t) }

// replica is one envoy-rls process serving RLQS.
type replica struct {
	*rlsproc.Proc
	token string
}

// rig is two envoy-rls replicas on one Redis and n Envoys, Envoy i
// talking to replica i%2, each with its own upstream.
type rig struct {
	Redis     *redistest.Server
	Replicas  []*replica
	Envoys    []*envoytest.Envoy
	Upstreams []*countingUpstream
	URLs      []string
	RulesDir  string
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startRig starts the rig with the shipped example rules (rules, when not
// empty, replaces the rule file's text); extra are more flags for every
// replica.
func startRig(t *testing.T, envoys int, rules string, extra ...string) *rig {
	t.Helper()
	g := &rig{Redis: redistest.Standalone(t), RulesDir: t.TempDir()}
	if rules == "" {
		rules = string(childproc.ReadRepoFile(t, "examples/rlqs/config/rlqs.yaml"))
	}
	g.writeRules(t, rules)
	tokFile := filepath.Join(t.TempDir(), "token")
	const token = "rlqs-test-token"
	if err := os.WriteFile(tokFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		args := []string{"serve", "--config-dir", g.RulesDir,
			// Fixed gRPC port: a restarted replica serves where the Envoys point.
			"--grpc-addr", freeAddr(t), "--http-addr", "127.0.0.1:0", "--debug-addr", "127.0.0.1:0",
			"--redis-url", "redis://" + g.Redis.Addr, "--redis-timeout=2s",
			"--rlqs-key-order", "name,client",
			"--admin-token-file", tokFile, "--override-refresh", "500ms"}
		args = append(args, extra...)
		g.Replicas = append(g.Replicas, &replica{Proc: rlsproc.Start(t, binPath, args, nil), token: token})
	}
	boot := childproc.ReadRepoFile(t, "examples/rlqs/envoy.yaml")
	if !bytes.Contains(boot, []byte(exampleInstance)) {
		t.Fatalf("examples/rlqs/envoy.yaml no longer names its instance %q", exampleInstance)
	}
	for i := 0; i < envoys; i++ {
		u := startUpstream(t)
		named := bytes.Replace(boot, []byte(exampleInstance), []byte(fmt.Sprintf("value: edge-%d", i+1)), 1)
		local, err := envoytest.Rewrite(named, envoytest.Addresses{
			Clusters:  map[string]string{"envoy_rls": g.Replicas[i%2].GRPCAddr, "echo": u.Addr},
			Listeners: map[string]string{"ingress": "127.0.0.1:0"},
			Admin:     "127.0.0.1:0",
		})
		if err != nil {
			t.Fatal(err)
		}
		e := envoytest.Start(t, local, envoytest.Options{Name: fmt.Sprintf("%s-edge-%d", t.Name(), i+1)})
		la, err := e.ListenerAddr("ingress")
		if err != nil {
			t.Fatal(err)
		}
		g.Envoys = append(g.Envoys, e)
		g.Upstreams = append(g.Upstreams, u)
		g.URLs = append(g.URLs, "http://"+la)
	}
	return g
}

// writeRules replaces the rule file atomically.
func (g *rig) writeRules(t *testing.T, rules string) {
	t.Helper()
	tmp := filepath.Join(g.RulesDir, ".tmp-rlqs.yaml")
	if err := os.WriteFile(tmp, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(g.RulesDir, "rlqs.yaml")); err != nil {
		t.Fatal(err)
	}
}

var client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

// get sends one request through Envoy i and returns the status (0 on a
// transport error).
func (g *rig) get(i int, path, xclient string) int {
	req, err := http.NewRequest(http.MethodGet, g.URLs[i]+path, nil)
	if err != nil {
		return 0
	}
	if xclient != "" {
		req.Header.Set("x-client", xclient)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// load sends requests for client alice through Envoy i at perSecond until
// stopped, for at most maxDur (a hang guard: every load loop is bounded).
type load struct {
	stop    chan struct{}
	done    chan struct{}
	sent    atomic.Int64
	okCount atomic.Int64
	denied  atomic.Int64
	errs    atomic.Int64
}

func (g *rig) startLoad(i int, perSecond int, maxDur time.Duration) *load {
	l := &load{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		tick := time.NewTicker(time.Second / time.Duration(perSecond))
		defer tick.Stop()
		deadline := time.After(maxDur)
		var wg sync.WaitGroup
		defer wg.Wait()
		// A few workers, so one slow answer does not stall the rate.
		work := make(chan struct{}, 8)
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range work {
					switch g.get(i, "/api", "alice") {
					case http.StatusOK:
						l.okCount.Add(1)
					case http.StatusTooManyRequests:
						l.denied.Add(1)
					default:
						l.errs.Add(1)
					}
				}
			}()
		}
		defer close(work)
		for {
			select {
			case <-l.stop:
				return
			case <-deadline:
				return
			case <-tick.C:
				select {
				case work <- struct{}{}:
					l.sent.Add(1)
				default: // workers busy: drop, the rate is an upper bound
				}
			}
		}
	}()
	return l
}

func (l *load) Stop() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}

// assignment is one entry of a replica's /debug/config rlqs_assignments.
type assignment struct {
	Instance      string            `json:"instance"`
	Domain        string            `json:"domain"`
	Bucket        map[string]string `json:"bucket"`
	Rule          string            `json:"rule"`
	Kind          string            `json:"kind"`
	TokensPerFill int64             `json:"tokens_per_fill"`
	MaxTokens     int64             `json:"max_tokens"`
	Instances     int               `json:"instances"`
	Sent          time.Time         `json:"sent"`
}

// assignments returns every replica's current assignments for the
// bucket named name (and client, when not empty), by instance.
func (g *rig) assignments(t *testing.T, name, xclient string) map[string]assignment {
	t.Helper()
	out := map[string]assignment{}
	for _, r := range g.Replicas {
		resp, err := http.Get("http://" + r.DebugAddr + "/debug/config")
		if err != nil {
			continue // a replica being restarted
		}
		var page struct {
			RLQS []assignment `json:"rlqs_assignments"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("decode /debug/config: %v", err)
		}
		for _, a := range page.RLQS {
			if a.Bucket["name"] == name && (xclient == "" || a.Bucket["client"] == xclient) {
				out[a.Instance] = a
			}
		}
	}
	return out
}

// waitAssigned polls the replicas until cond holds for the bucket's
// assignments, and returns how long that took. The deadline only keeps a
// broken run from hanging.
func (g *rig) waitAssigned(t *testing.T, what, name, xclient string, deadline time.Duration, cond func(map[string]assignment) bool) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	for {
		as := g.assignments(t, name, xclient)
		if cond(as) {
			return time.Since(start)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not reached within %v; assignments: %+v", what, deadline, as)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// tokenSum is the sum of the token-bucket rates of the given instances
// when each has a token bucket, else -1.
func tokenSum(as map[string]assignment, instances ...string) int64 {
	var sum int64
	for _, inst := range instances {
		a, ok := as[inst]
		if !ok || a.Kind != "token_bucket" {
			return -1
		}
		sum += a.TokensPerFill
	}
	return sum
}

// setOverride sets a runtime override on replica 0 (stored in Redis, so
// both replicas apply it).
func (g *rig) setOverride(t *testing.T, body string) {
	t.Helper()
	r := g.Replicas[0]
	req, _ := http.NewRequest(http.MethodPost, "http://"+r.DebugAddr+"/admin/overrides", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+r.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("set override: %d %s", resp.StatusCode, b)
	}
}

// quota is one RLQS assignment as explain reports it.
type quota struct {
	Instance string `json:"instance"`
	Kind     string `json:"kind"`
}

// explainQuotas asks replica 0's live explain about the bucket
// {name: name} and returns its RLQS assignments.
func (g *rig) explainQuotas(t *testing.T, name string) []quota {
	t.Helper()
	body := fmt.Sprintf(`{"domain":"rlqs-example","descriptors":[[{"key":"name","value":%q}]]}`, name)
	resp, err := client.Post("http://"+g.Replicas[0].DebugAddr+"/debug/explain", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep struct {
		Descriptors []struct {
			Quotas []quota `json:"rlqs_assignments"`
		} `json:"descriptors"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		t.Fatalf("decode /debug/explain: %v", err)
	}
	if len(rep.Descriptors) != 1 {
		t.Fatalf("explain: %d descriptors, want 1", len(rep.Descriptors))
	}
	return rep.Descriptors[0].Quotas
}

// metrics returns replica i's /metrics text.
func (g *rig) metrics(t *testing.T, i int) string {
	t.Helper()
	resp, err := client.Get("http://" + g.Replicas[i].HTTPAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

package budget

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/childproc"
	"github.com/envoy-rls/envoy-rls/internal/envoytest"
	"github.com/envoy-rls/envoy-rls/internal/eventually"
	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/internal/rlsproc"
)

// TestExampleAsShipped runs examples/budget as docs/budgets.md tells:
// envoy-rls on examples/budget/config, Envoy on examples/budget/envoy.yaml
// with only its addresses and its filter's timeout changed (its model
// listener answers 42 tokens).
// Each request reserves its x-max-tokens figure (1024 without one) and is
// settled to the 42 tokens it used, so the day's counter holds 42 per
// request; a request whose reservation exceeds what the minute's bucket
// holds is denied, and its reservation given back.
func TestExampleAsShipped(t *testing.T) {
	red := redistest.Standalone(t)
	rls := rlsproc.Start(t, binPath, []string{"serve", "--config-dir", rlsproc.RepoPath("examples/budget/config"),
		"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--debug-addr", "127.0.0.1:0",
		"--redis-timeout=2s", "--redis-url", "redis://" + red.Addr}, nil)
	port, err := childproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	model := "127.0.0.1:" + strconv.Itoa(port)
	local, err := envoytest.Rewrite(patientExample(t), envoytest.Addresses{
		Clusters:  map[string]string{"envoy_rls": rls.GRPCAddr, "llm": model},
		Listeners: map[string]string{"ingress": "127.0.0.1:0", "model": model},
		Admin:     "127.0.0.1:0",
	})
	if err != nil {
		t.Fatal(err)
	}
	e := envoytest.Start(t, local, envoytest.Options{Name: "example"})
	la, err := e.ListenerAddr("ingress")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + la + "/v1/chat/completions"
	alice := map[string]string{"x-user-id": "alice"}

	// Every request makes two calls: the reservation, and the settlement
	// at stream done (a charge and a refund, one of them 0).
	settled := func(requests int) {
		t.Helper()
		eventually.True(t, "the settlements reach envoy-rls", func() (bool, string) {
			got := rlsCalls(t, []*rlsproc.Proc{rls})
			return got >= 2*requests, fmt.Sprintf("%d calls, want %d", got, 2*requests)
		})
	}
	for i, est := range []int64{200, 0, 30} {
		c := ask(url, alice, 0, est, 0)
		if c.Err != nil || c.Status != http.StatusOK || c.Tokens != 42 {
			t.Fatalf("request %d (x-max-tokens %d): %d %d tokens (%v), want 200 and 42", i, est, c.Status, c.Tokens, c.Err)
		}
		settled(i + 1)
		if got := counted(t, red); got != int64(42*(i+1)) {
			t.Fatalf("after %d requests the day's counter holds %d, want %d: each settled to what it used", i+1, got, 42*(i+1))
		}
	}
	// More than the minute's 20 000 (less the 126 used) is denied, and
	// given back: the counter is unchanged.
	if c := ask(url, alice, 0, 19900, 0); c.Err != nil || c.Status != http.StatusTooManyRequests {
		t.Fatalf("a reservation of 19 900 got %d (%v), want 429", c.Status, c.Err)
	}
	settled(4)
	if got := counted(t, red); got != 3*42 {
		t.Fatalf("after a denied reservation the day's counter holds %d, want %d", got, 3*42)
	}
	// What is left still passes.
	if c := ask(url, alice, 0, 19800, 0); c.Err != nil || c.Status != http.StatusOK {
		t.Fatalf("a reservation of 19 800 got %d (%v), want 200", c.Status, c.Err)
	}
}

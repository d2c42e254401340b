package e2e

import (
	"fmt"
	"net/http"
	"testing"
)

// TestThroughEnvoy is the shortest proof that the chain works on each
// store: a request passes to the upstream, and the login route's
// login_per_minute (5 a minute per client address) refuses the sixth.
func TestThroughEnvoy(t *testing.T) {
	for _, st := range stores {
		t.Run(string(st), func(t *testing.T) {
			s := startStack(t, stackOpts{Store: st})
			if a := s.mustDo(t, request{Path: "/hello"}); a.Status != http.StatusOK || a.Body != "ok" {
				t.Fatalf("GET /hello: %v %q, want 200 ok from the upstream", a, a.Body)
			}
			var got []int
			for range 6 {
				got = append(got, s.mustDo(t, request{Method: http.MethodPost, Path: "/api/login", From: "127.0.0.21"}).Status)
			}
			if want := "[200 200 200 200 200 429]"; fmt.Sprint(got) != want {
				t.Fatalf("six logins from one address: %v, want %s", got, want)
			}
			if n := s.limitDecisions(t, "login_per_minute", "over_limit"); n != 1 {
				t.Fatalf("envoy-rls counted %v login_per_minute denials, want 1", n)
			}
		})
	}
}

package e2e

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestOverLimitHeaders checks what a client behind Envoy sees at and over a
// limit: 429 with x-envoy-ratelimited; the X-RateLimit-* headers Envoy
// builds from envoy-rls's statuses (enable_x_ratelimit_headers:
// DRAFT_VERSION_03) consistent with the rule; and envoy-rls's own
// RateLimit, RateLimit-Policy and Retry-After, which Envoy copies from the
// answer's response_headers_to_add onto the client's response, on 200 (the
// upstream's response) and on 429 (Envoy's own), exactly when
// --response-headers asks for them (the compose file sets
// ENVOY_RLS_RESPONSE_HEADERS=draft,retry-after).
func TestOverLimitHeaders(t *testing.T) {
	configs := []struct {
		name  string
		env   []string
		draft bool // RateLimit, RateLimit-Policy on every answer
		retry bool // Retry-After on 429
	}{
		{name: "draft,retry-after", env: []string{"ENVOY_RLS_RESPONSE_HEADERS=draft,retry-after"}, draft: true, retry: true},
		{name: "none", env: nil},
	}
	for _, st := range stores {
		for _, cfg := range configs {
			t.Run(string(st)+"/"+cfg.name, func(t *testing.T) {
				s := startStack(t, stackOpts{Store: st, Env: cfg.env})
				// login_per_minute as shipped: sliding_log, 5 a minute per
				// address. The login route also sends per_ip (50/s) and
				// login_path (600/min), which stay far from their limits.
				for i := 1; i <= 7; i++ {
					a := s.mustDo(t, request{Method: http.MethodPost, Path: "/api/login", From: "127.0.0.52"})
					want, remaining := http.StatusOK, 5-i
					if i > 5 {
						want, remaining = http.StatusTooManyRequests, 0
					}
					if a.Status != want {
						t.Fatalf("login %d: %v, want %d", i, a, want)
					}
					if err := checkLoginHeaders(a, remaining, cfg.draft, cfg.retry); err != nil {
						t.Errorf("login %d: %v\n%v", i, err, a.Header)
					}
				}
				// A limit with a burst: Envoy reports the rule's own rate
				// (20 a second) from current_limit, envoy-rls's draft
				// fields the capacity (40 in 2s); README.md says so.
				a := s.mustDo(t, request{Path: "/hello", From: "127.0.0.53", Header: map[string]string{"x-user-id": "burst"}})
				if a.Status != http.StatusOK {
					t.Fatalf("GET /hello as a user: %v", a)
				}
				var errs []string
				check := func(name, want string) {
					if got := a.Header.Get(name); got != want {
						errs = append(errs, fmt.Sprintf("%s: %q, want %q", name, got, want))
					}
				}
				lim := a.Header.Get("X-RateLimit-Limit")
				if !strings.HasPrefix(lim, "20, ") || !strings.Contains(lim, `20;w=1;name="user_per_second"`) {
					errs = append(errs, fmt.Sprintf("X-RateLimit-Limit: %q, want 20 and user_per_second's 20;w=1", lim))
				}
				check("X-RateLimit-Remaining", "39")
				if cfg.draft {
					check("RateLimit-Policy", `"user_per_second";q=40;w=2`)
				} else {
					check("RateLimit-Policy", "")
				}
				if errs != nil {
					t.Errorf("a user's first request:\n%s\n%v", strings.Join(errs, "\n"), a.Header)
				}
			})
		}
	}
}

// checkLoginHeaders checks one answer on the login route against
// login_per_minute (5 a minute), with remaining requests left.
func checkLoginHeaders(a answer, remaining int, draft, retry bool) error {
	var errs []string
	over := a.Status == http.StatusTooManyRequests
	if got := a.Header.Get("x-envoy-ratelimited"); (got == "true") != over {
		errs = append(errs, fmt.Sprintf("x-envoy-ratelimited: %q on %d", got, a.Status))
	}
	// Envoy: the lowest limit first, then one quota policy per descriptor.
	lim := a.Header.Values("X-RateLimit-Limit")
	if len(lim) != 1 || !strings.HasPrefix(lim[0], "5, ") || !strings.Contains(lim[0], `5;w=60;name="login_per_minute"`) {
		errs = append(errs, fmt.Sprintf("X-RateLimit-Limit: %q, want one, 5 with login_per_minute's 5;w=60", lim))
	}
	if got := a.Header.Values("X-RateLimit-Remaining"); len(got) != 1 || got[0] != strconv.Itoa(remaining) {
		errs = append(errs, fmt.Sprintf("X-RateLimit-Remaining: %q, want %d", got, remaining))
	}
	// The reset is at most the rule's minute away: the oldest of the
	// hits leaves the log within it.
	reset, err := strconv.Atoi(a.Header.Get("X-RateLimit-Reset"))
	if err != nil || reset < 0 || reset > 60 {
		errs = append(errs, fmt.Sprintf("X-RateLimit-Reset: %q, want 0..60", a.Header.Get("X-RateLimit-Reset")))
	}
	if draft {
		if got, want := a.Header.Get("RateLimit-Policy"), `"login_per_minute";q=5;w=60`; got != want {
			errs = append(errs, fmt.Sprintf("RateLimit-Policy: %q, want %q", got, want))
		}
		rl := a.Header.Get("RateLimit")
		prefix := fmt.Sprintf(`"login_per_minute";r=%d;t=`, remaining)
		if t, ok := strings.CutPrefix(rl, prefix); !ok || !inRange(t, 1, 60) {
			errs = append(errs, fmt.Sprintf("RateLimit: %q, want %s1..60", rl, prefix))
		}
	} else {
		for _, h := range []string{"RateLimit", "RateLimit-Policy"} {
			if got := a.Header.Get(h); got != "" {
				errs = append(errs, fmt.Sprintf("%s: %q without --response-headers=draft", h, got))
			}
		}
	}
	switch ra := a.Header.Get("Retry-After"); {
	case over && retry && !inRange(ra, 1, 60):
		errs = append(errs, fmt.Sprintf("Retry-After: %q on 429, want 1..60", ra))
	case (!over || !retry) && ra != "":
		errs = append(errs, fmt.Sprintf("Retry-After: %q on %d (retry-after %v)", ra, a.Status, retry))
	}
	if errs != nil {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// inRange reports whether s is a whole number in [lo, hi].
func inRange(s string, lo, hi int) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= lo && n <= hi
}

// TestLegacyHeadersDoubleEnvoys shows why README.md says to turn Envoy's
// enable_x_ratelimit_headers off with --response-headers=legacy: Envoy
// adds its own X-RateLimit-* and then envoy-rls's, so the client gets each
// header twice.
func TestLegacyHeadersDoubleEnvoys(t *testing.T) {
	for _, st := range stores {
		t.Run(string(st), func(t *testing.T) {
			s := startStack(t, stackOpts{Store: st, Env: []string{"ENVOY_RLS_RESPONSE_HEADERS=legacy"}})
			a := s.mustDo(t, request{Method: http.MethodPost, Path: "/api/login", From: "127.0.0.54"})
			if a.Status != http.StatusOK {
				t.Fatalf("login: %v", a)
			}
			for _, h := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
				if got := a.Header.Values(h); len(got) != 2 {
					t.Errorf("%s: %q, want Envoy's and envoy-rls's", h, got)
				}
			}
			if got := a.Header.Values("X-RateLimit-Remaining"); len(got) == 2 && (got[0] != "4" || got[1] != "4") {
				t.Errorf("X-RateLimit-Remaining: %q, want 4 from both", got)
			}
		})
	}
}

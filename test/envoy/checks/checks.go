// Package checks is the one list of end-to-end checks of a running stack:
// Envoy with envoy-config/envoy.yaml in front of an upstream that answers
// "ok", asking envoy-rls (serving examples/config, with
// ENVOY_RLS_RESPONSE_HEADERS=draft,retry-after) about every request. Two
// starters run it: test/e2e/run.sh against the docker-compose stack
// (through cmd/envoy-checks), and the native Envoy tests of test/envoy/e2e
// against processes on loopback. It only sends HTTP requests to the URLs
// it is given; it must not start, stop or configure anything, and it knows
// nothing of how the stack was started.
//
// The checks are ordered and stateful (the login checks use up one client
// address's login_per_minute), so run each phase once per fresh stack.
package checks

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Target is the stack under test.
type Target struct {
	// EnvoyURL is Envoy's listener (http://host:10000 in compose).
	EnvoyURL string
	// AdminURL is Envoy's admin interface.
	AdminURL string
	// RLSURL is envoy-rls's HTTP address (/metrics, /readyz).
	RLSURL string
	// Client sends every request; nil means a client with a 10s timeout.
	// All requests must come from one source address: the login checks
	// count on it.
	Client *http.Client
}

// Check is one named check.
type Check struct {
	Name string
	Run  func(ctx context.Context, t Target) error
}

// Phase is a list of checks that run together.
type Phase struct {
	Name   string
	Checks []Check
}

// Up runs with the whole stack up; RLSStopped after envoy-rls was stopped
// (Envoy and the upstream still up), before it is started again.
var (
	Up         = Phase{Name: "up", Checks: upChecks}
	RLSStopped = Phase{Name: "rls-stopped", Checks: rlsStoppedChecks}
)

// Phases are every phase, by name.
var Phases = map[string]Phase{Up.Name: Up, RLSStopped.Name: RLSStopped}

// Run runs the phase's checks in order, calls report with each one's
// result, and returns how many failed.
func (p Phase) Run(ctx context.Context, t Target, report func(name string, err error)) int {
	failed := 0
	for _, c := range p.Checks {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := c.Run(cctx, t)
		cancel()
		if err != nil {
			failed++
		}
		report(c.Name, err)
	}
	return failed
}

var upChecks = []Check{
	{"an ordinary request passes with Envoy's and envoy-rls's rate-limit headers", checkOrdinary},
	{"login_per_minute: five logins from one address pass", checkFiveLogins},
	{"the sixth login gets 429 with x-envoy-ratelimited and Retry-After", checkSixthLogin},
	{"other routes still pass after the login limit", checkOtherRoutes},
	{"Envoy counted the refusal (cluster.echo.ratelimit.over_limit)", checkEnvoyOverLimit},
	{"envoy-rls counted the refusal per rule (envoy_rls_limit_decisions_total)", checkRLSDecisions},
}

var rlsStoppedChecks = []Check{
	{"with envoy-rls stopped, requests pass (failure_mode_deny: false)", checkFailOpen},
}

// response is what one request got.
type response struct {
	status int
	header http.Header
	body   string
}

func (r response) String() string { return fmt.Sprintf("%d %v", r.status, r.header) }

func (t Target) client() *http.Client {
	if t.Client != nil {
		return t.Client
	}
	return &http.Client{Timeout: 10 * time.Second}
}

// do sends one request and reads the whole answer.
func (t Target) do(ctx context.Context, method, url string, header map[string]string) (response, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return response{}, fmt.Errorf("checks: %s %s: %w", method, url, err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := t.client().Do(req)
	if err != nil {
		return response{}, fmt.Errorf("checks: %s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, fmt.Errorf("checks: %s %s: reading the body: %w", method, url, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}, nil
}

// expect collects what is wrong with one response.
type expect struct {
	r    response
	errs []string
}

func (e *expect) status(want int) {
	if e.r.status != want {
		e.errs = append(e.errs, fmt.Sprintf("status %d, want %d", e.r.status, want))
	}
}

func (e *expect) header(name, want string) {
	if got := e.r.header.Get(name); got != want {
		e.errs = append(e.errs, fmt.Sprintf("%s: %q, want %q", name, got, want))
	}
}

// headerPrefix wants the header to start with prefix and the rest to be
// a whole number in [lo, hi].
func (e *expect) headerNumber(name, prefix string, lo, hi int) {
	got := e.r.header.Get(name)
	rest, ok := strings.CutPrefix(got, prefix)
	n, err := strconv.Atoi(rest)
	if !ok || err != nil || n < lo || n > hi {
		e.errs = append(e.errs, fmt.Sprintf("%s: %q, want %s%d..%d", name, got, prefix, lo, hi))
	}
}

func (e *expect) err() error {
	if e.errs == nil {
		return nil
	}
	return fmt.Errorf("%s\n  got %v", strings.Join(e.errs, "; "), e.r)
}

// checkOrdinary: GET / passes to the upstream. Its descriptors reach only
// per_ip (token_bucket, 50 a second, burst 100): Envoy's X-RateLimit-Limit
// leads with the rule's rate, and envoy-rls's RateLimit-Policy gives the
// capacity, 100 in 2 seconds.
func checkOrdinary(ctx context.Context, t Target) error {
	r, err := t.do(ctx, http.MethodGet, t.EnvoyURL+"/", nil)
	if err != nil {
		return err
	}
	e := expect{r: r}
	e.status(http.StatusOK)
	if strings.TrimSpace(r.body) != "ok" {
		e.errs = append(e.errs, fmt.Sprintf("body %q, want the upstream's ok", r.body))
	}
	e.header("X-RateLimit-Limit", `50, 50;w=1;name="per_ip"`)
	e.headerNumber("X-RateLimit-Remaining", "", 0, 99)
	e.header("RateLimit-Policy", `"per_ip";q=100;w=2`)
	e.header("Retry-After", "")
	return e.err()
}

func login(ctx context.Context, t Target) (response, error) {
	return t.do(ctx, http.MethodPost, t.EnvoyURL+"/api/login", nil)
}

// checkFiveLogins: login_per_minute (sliding_log, 5 a minute per client
// address) admits five, counting down in both header sets. It sends all
// five whatever they get, so the next check sees the sixth.
func checkFiveLogins(ctx context.Context, t Target) error {
	var errs []error
	for i := 1; i <= 5; i++ {
		r, err := login(ctx, t)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		e := expect{r: r}
		e.status(http.StatusOK)
		e.header("X-RateLimit-Remaining", strconv.Itoa(5-i))
		if !strings.HasPrefix(r.header.Get("X-RateLimit-Limit"), `5, 5;w=60;name="login_per_minute"`) {
			e.errs = append(e.errs, fmt.Sprintf("X-RateLimit-Limit: %q, want login_per_minute's 5 first", r.header.Get("X-RateLimit-Limit")))
		}
		e.header("RateLimit-Policy", `"login_per_minute";q=5;w=60`)
		e.headerNumber("RateLimit", fmt.Sprintf(`"login_per_minute";r=%d;t=`, 5-i), 1, 60)
		if err := e.err(); err != nil {
			errs = append(errs, fmt.Errorf("login %d: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

// checkSixthLogin: over the limit, Envoy answers 429 itself, with
// x-envoy-ratelimited, and passes envoy-rls's Retry-After on.
func checkSixthLogin(ctx context.Context, t Target) error {
	r, err := login(ctx, t)
	if err != nil {
		return err
	}
	e := expect{r: r}
	e.status(http.StatusTooManyRequests)
	e.header("x-envoy-ratelimited", "true")
	e.header("X-RateLimit-Remaining", "0")
	e.headerNumber("X-RateLimit-Reset", "", 0, 60)
	e.headerNumber("Retry-After", "", 1, 60)
	e.header("RateLimit-Policy", `"login_per_minute";q=5;w=60`)
	return e.err()
}

// checkOtherRoutes: the login limit is the login route's alone.
func checkOtherRoutes(ctx context.Context, t Target) error {
	r, err := t.do(ctx, http.MethodGet, t.EnvoyURL+"/api/orders", map[string]string{"x-user-id": "e2e-user"})
	if err != nil {
		return err
	}
	e := expect{r: r}
	e.status(http.StatusOK)
	return e.err()
}

// checkEnvoyOverLimit: Envoy's stat of over-limit answers.
func checkEnvoyOverLimit(ctx context.Context, t Target) error {
	n, err := t.envoyStat(ctx, "cluster.echo.ratelimit.over_limit")
	if err != nil {
		return err
	}
	if n < 1 {
		return fmt.Errorf("cluster.echo.ratelimit.over_limit = %d, want at least 1", n)
	}
	return nil
}

// checkRLSDecisions: envoy-rls's /metrics counts the refusal under the
// rule's name.
func checkRLSDecisions(ctx context.Context, t Target) error {
	r, err := t.do(ctx, http.MethodGet, t.RLSURL+"/metrics", nil)
	if err != nil {
		return err
	}
	if r.status != http.StatusOK {
		return fmt.Errorf("/metrics: status %d", r.status)
	}
	var over float64
	sc := bufio.NewScanner(strings.NewReader(r.body))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "envoy_rls_limit_decisions_total{") ||
			!strings.Contains(line, `limit="login_per_minute"`) || !strings.Contains(line, `code="over_limit"`) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return fmt.Errorf("/metrics: %q: %w", line, err)
		}
		over += v
	}
	if over < 1 {
		return fmt.Errorf("envoy_rls_limit_decisions_total{limit=\"login_per_minute\",code=\"over_limit\"} = %v, want at least 1", over)
	}
	return nil
}

// checkFailOpen: with envoy-rls gone, Envoy lets the request through and
// counts it as failure_mode_allowed.
func checkFailOpen(ctx context.Context, t Target) error {
	before, err := t.envoyStat(ctx, "cluster.echo.ratelimit.failure_mode_allowed")
	if err != nil {
		return err
	}
	r, err := t.do(ctx, http.MethodGet, t.EnvoyURL+"/", nil)
	if err != nil {
		return err
	}
	e := expect{r: r}
	e.status(http.StatusOK)
	e.header("X-RateLimit-Limit", "")
	if err := e.err(); err != nil {
		return err
	}
	after, err := t.envoyStat(ctx, "cluster.echo.ratelimit.failure_mode_allowed")
	if err != nil {
		return err
	}
	if after != before+1 {
		return fmt.Errorf("cluster.echo.ratelimit.failure_mode_allowed went from %d to %d, want one more", before, after)
	}
	return nil
}

// envoyStat reads one of Envoy's counters from the admin interface (0
// when Envoy has not used it yet).
func (t Target) envoyStat(ctx context.Context, name string) (int64, error) {
	r, err := t.do(ctx, http.MethodGet, t.AdminURL+"/stats?filter=^"+name+"$", nil)
	if err != nil {
		return 0, err
	}
	if r.status != http.StatusOK {
		return 0, fmt.Errorf("checks: Envoy admin /stats: status %d", r.status)
	}
	for _, line := range strings.Split(r.body, "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if ok && k == name {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("checks: Envoy stat %s: %w", name, err)
			}
			return n, nil
		}
	}
	return 0, nil
}

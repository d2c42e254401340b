package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"
)

// shortDeadlineWarning is the start of envoy-rls's warning about a caller
// whose deadline is shorter than a queued limit's max_delay.
const shortDeadlineWarning = "a caller's deadline is shorter than a queued limit's max_delay"

// queuedAnswer is one vip request's answer, with what the upstream saw.
type queuedAnswer struct {
	answer
	id string
	// reservedAt is X-RateLimit-Reserved-At (Unix µs; 0 when not held).
	reservedAt int64
}

// sendAll sends n requests at once (goroutines released together), each
// with its own x-req-id ("<prefix>-<i>"), and returns the answers.
func (s *stack) sendAll(t testing.TB, n int, prefix string, r request) []queuedAnswer {
	t.Helper()
	out := make([]queuedAnswer, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := r
			req.Header = map[string]string{"x-req-id": fmt.Sprintf("%s-%d", prefix, i)}
			for k, v := range r.Header {
				req.Header[k] = v
			}
			<-start
			a := s.do(req)
			q := queuedAnswer{answer: a, id: req.Header["x-req-id"]}
			if v := a.Header.Get("X-RateLimit-Reserved-At"); v != "" {
				at, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Errorf("X-RateLimit-Reserved-At %q: %v", v, err)
				}
				q.reservedAt = at
			}
			out[i] = q
		}()
	}
	close(start)
	wg.Wait()
	return out
}

// upstreamArrivals maps x-req-id to when the upstream served it; a
// request served twice fails t.
func (s *stack) upstreamArrivals(t testing.TB) map[string]time.Time {
	t.Helper()
	out := map[string]time.Time{}
	for _, h := range s.Upstream.Hits() {
		id := h.Header.Get("x-req-id")
		if id == "" {
			continue
		}
		if _, dup := out[id]; dup {
			t.Errorf("the upstream served %s twice", id)
		}
		out[id] = h.At
	}
	return out
}

// metricValue sums envoy-rls's samples of a counter or gauge, or the
// sample count of a histogram, over every label.
func (s *stack) metricValue(t testing.TB, name string) float64 {
	t.Helper()
	var sum float64
	for _, m := range s.scrape(t)[name].GetMetric() {
		switch {
		case m.GetCounter() != nil:
			sum += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			sum += m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// TestQueueModeThroughEnvoy sends concurrent vip requests over
// vip_per_second (gcra 20/s, on_limit: delay, max_delay 200ms, as shipped)
// through Envoy (filter timeout 0.25s, as shipped): the 3 over the burst
// are held, never refused, their reserved slots are the rule's interval
// (50ms) apart, none reaches the upstream before its slot, and every answer
// came from envoy-rls within Envoy's timeout (no ratelimit.error, no
// failure_mode_allowed).
//
// The test copy's burst is 4 instead of 40, and 3 requests go over it,
// not the 4 that max_delay admits: the shipped timeout leaves 50ms above
// max_delay for envoy-rls's and Envoy's own latency, and on a busy 2-core
// machine 44 requests at once, or a hold of the full 200ms, overrun it
// now and then (the request then fails open in Envoy). A hold of at most
// 150ms leaves 100ms.
func TestQueueModeThroughEnvoy(t *testing.T) {
	const (
		burst    = 4
		interval = 50_000 // µs: 20 a second
		maxHeld  = 3      // held at most 150ms
		rounds   = 3
	)
	rules := withLimits(t, exampleRules(t), map[string]limitSpec{"vip_per_second": {RPU: 20, Unit: "second", Burst: burst}})
	for _, st := range stores {
		t.Run(string(st), func(t *testing.T) {
			s := startStack(t, stackOpts{Store: st, Rules: rules, ShippedTimeout: true})
			sent, held := 0, 0
			// How many of a round are held depends on how close together
			// they arrive; a round on a busy machine may hold none. Each
			// round is checked in full; rounds go on, bounded, until one
			// held some.
			for round := 0; round < rounds && held == 0; round++ {
				from := fmt.Sprintf("127.0.0.%d", 60+round)
				// Open the client's connections first, so the vip requests
				// leave together.
				for _, a := range s.sendAll(t, burst+maxHeld, fmt.Sprintf("warm%d", round), request{Path: "/healthz", From: from}) {
					if a.Err != nil || a.Status != http.StatusOK {
						t.Fatalf("warm-up: %v", a)
					}
				}
				sent += burst + maxHeld
				vip := request{Path: "/hello", From: from, Header: map[string]string{"x-api-tier": "vip", "x-user-id": fmt.Sprintf("vip-%d", round)}}
				answers := s.sendAll(t, burst+maxHeld, fmt.Sprintf("vip%d", round), vip)
				sent += burst + maxHeld
				var slots []int64
				for _, a := range answers {
					if a.Err != nil || a.Status != http.StatusOK {
						t.Fatalf("round %d: vip request %s: %v, want 200 (delayed, not refused)", round, a.id, a)
					}
					if a.reservedAt != 0 {
						slots = append(slots, a.reservedAt)
						if a.Header.Get("X-RateLimit-Delay-Ms") == "" {
							t.Errorf("held request %s has no X-RateLimit-Delay-Ms: %v", a.id, a)
						}
					}
				}
				if len(slots) > maxHeld {
					t.Fatalf("round %d: %d held, want at most the %d over the burst", round, len(slots), maxHeld)
				}
				held += len(slots)
				slices.Sort(slots)
				t.Logf("round %d: %d of %d held, reserved at %v", round, len(slots), len(answers), slots)
				for i := 1; i < len(slots); i++ {
					if d := slots[i] - slots[i-1]; d < interval {
						t.Errorf("round %d: reserved slots %v: %dµs apart, want at least the rule's interval %dµs", round, slots, d, interval)
					}
				}
				// Never early at the upstream: a held request passes at its
				// slot plus envoy-rls's and Envoy's latency (the backend's
				// clock, Redis TIME or this host's, is this host's clock;
				// 2ms covers clock reads). The upper bound is a hang guard.
				arrivals := s.upstreamArrivals(t)
				for _, a := range answers {
					at, ok := arrivals[a.id]
					if !ok {
						t.Errorf("round %d: %s never reached the upstream", round, a.id)
						continue
					}
					if a.reservedAt == 0 {
						continue
					}
					slot := time.UnixMicro(a.reservedAt)
					if at.Before(slot.Add(-2*time.Millisecond)) || at.After(slot.Add(10*time.Second)) {
						t.Errorf("round %d: held request %s reached the upstream at %v, %v from its slot", round, a.id, at.Format(time.StampMicro), at.Sub(slot))
					}
				}
			}
			if held == 0 {
				t.Fatalf("no vip request was held in %d rounds of %d at once", rounds, burst+maxHeld)
			}
			if n := len(s.upstreamArrivals(t)); n != sent {
				t.Errorf("the upstream served %d requests, want all %d", n, sent)
			}
			// Envoy: every call answered in time, none failed open.
			if n := s.envoyStat(t, "cluster.echo.ratelimit.ok"); n != int64(sent) {
				t.Errorf("Envoy's cluster.echo.ratelimit.ok = %d, want %d", n, sent)
			}
			for _, stat := range []string{"cluster.echo.ratelimit.error", "cluster.echo.ratelimit.failure_mode_allowed", "cluster.echo.ratelimit.over_limit"} {
				if n := s.envoyStat(t, stat); n != 0 {
					t.Errorf("Envoy's %s = %d, want 0", stat, n)
				}
			}
			// envoy-rls: as many holds as held answers, none given up.
			for name, want := range map[string]float64{
				"envoy_rls_hold_delay_seconds":          float64(held),
				"envoy_rls_requests_held":               0,
				"envoy_rls_reservations_returned_total": 0,
			} {
				if got := s.metricValue(t, name); got != want {
					t.Errorf("envoy-rls %s = %v, want %v", name, got, want)
				}
			}
			if n := s.limitDecisions(t, "vip_per_second", "over_limit"); n != 0 {
				t.Errorf("vip_per_second denied %v, want 0", n)
			}
			if strings.Contains(s.RLS.Logs.String(), shortDeadlineWarning) {
				t.Errorf("envoy-rls warned of a short deadline with the shipped 0.25s filter timeout")
			}
		})
	}
}

// TestQueueModeShortFilterTimeout runs a copy of envoy.yaml whose
// rate_limit filter timeout (0.1s) is shorter than vip_per_second's
// max_delay (200ms): envoy-rls warns once, naming the fix, and a request
// held past Envoy's timeout is what Envoy makes of a timed-out call: with
// failure_mode_deny: false it passes to the upstream unmetered (200,
// without envoy-rls's headers), counted in Envoy's ratelimit.error and
// failure_mode_allowed.
func TestQueueModeShortFilterTimeout(t *testing.T) {
	boot := string(childproc.ReadRepoFile(t, "envoy-config/envoy.yaml"))
	if !strings.Contains(boot, "timeout: 0.25s") {
		t.Fatal("envoy-config/envoy.yaml has no rate_limit filter timeout: 0.25s any more; update this test")
	}
	boot = strings.Replace(boot, "timeout: 0.25s", "timeout: 0.1s", 1)
	// 15 a second and a burst of 1: of 3 at once, the second is held about
	// 67ms and the third about 133ms, past Envoy's 0.1s but well within
	// the rule's 200ms max_delay. (At 10 a second the third's delay was
	// max_delay exactly, and a request stamped a moment before the one
	// decided ahead of it needed a hair more, and was refused.)
	rules := withLimits(t, exampleRules(t), map[string]limitSpec{"vip_per_second": {RPU: 15, Unit: "second", Burst: 1}})
	const rounds = 5
	for _, st := range stores {
		t.Run(string(st), func(t *testing.T) {
			s := startStack(t, stackOpts{Store: st, Rules: rules, Bootstrap: []byte(boot)})
			timedOut := 0
			for round := 0; round < rounds && timedOut == 0; round++ {
				from := fmt.Sprintf("127.0.0.%d", 70+round)
				s.sendAll(t, 3, fmt.Sprintf("warm%d", round), request{Path: "/healthz", From: from})
				vip := request{Path: "/hello", From: from, Header: map[string]string{"x-api-tier": "vip", "x-user-id": fmt.Sprintf("vip-%d", round)}}
				for _, a := range s.sendAll(t, 3, fmt.Sprintf("vip%d", round), vip) {
					if a.Err != nil || a.Status != http.StatusOK || a.Body != "ok" {
						t.Fatalf("vip request %s: %v %q, want 200 from the upstream (held, or failed open)", a.id, a, a.Body)
					}
					if a.Header.Get("X-RateLimit-Limit") == "" {
						timedOut++ // Envoy had no statuses: it failed open
					}
				}
			}
			t.Logf("%d vip requests outlasted Envoy's timeout", timedOut)
			if timedOut == 0 {
				t.Fatalf("no vip request outlasted Envoy's 0.1s timeout in %d rounds", rounds)
			}
			if n := s.envoyStat(t, "cluster.echo.ratelimit.failure_mode_allowed"); n != int64(timedOut) {
				t.Errorf("Envoy's failure_mode_allowed = %d, want %d (the answers without rate-limit headers)", n, timedOut)
			}
			if n := s.envoyStat(t, "cluster.echo.ratelimit.error"); n != int64(timedOut) {
				t.Errorf("Envoy's ratelimit.error = %d, want %d", n, timedOut)
			}
			logs := s.RLS.Logs.String()
			if n := strings.Count(logs, shortDeadlineWarning); n != 1 {
				t.Errorf("envoy-rls logged the short-deadline warning %d times, want once:\n%s", n, logs)
			}
			for _, want := range []string{
				"raise the rate_limit filter's timeout above max_delay, or lower max_delay",
				`"rule":"vip_per_second"`, `"max_delay":0.2`,
			} {
				if !strings.Contains(logs, want) {
					t.Errorf("envoy-rls's logs lack %s:\n%s", want, logs)
				}
			}
		})
	}
}

package e2e

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"
)

// trafficStats counts what a background client saw.
type trafficStats struct {
	mu                sync.Mutex
	sent, ok, limited int
	errs              []string
	// sentAtMark is sent when mark was called.
	sentAtMark int
}

// mark notes how many requests were sent so far (the moment of a change).
func (ts *trafficStats) mark() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.sentAtMark = ts.sent
}

// background sends requests through Envoy from a goroutine, in turn from
// several addresses and users, until stopped or max requests are sent,
// and records every answer. The returned function stops it and waits; it
// also runs at cleanup.
func (s *stack) background(t testing.TB, max int) (*trafficStats, func()) {
	ts := &trafficStats{}
	stop, done := make(chan struct{}), make(chan struct{})
	var once sync.Once
	stopAndWait := func() { once.Do(func() { close(stop) }); <-done }
	t.Cleanup(stopAndWait)
	go func() {
		defer close(done)
		for i := range max {
			select {
			case <-stop:
				return
			default:
			}
			r := request{Path: "/hello", From: fmt.Sprintf("127.0.0.%d", 100+i%50),
				Header: map[string]string{"x-user-id": fmt.Sprintf("bg-%d", i%7)}}
			if i%3 == 0 {
				r = request{Method: http.MethodPost, Path: "/api/orders", From: r.From, Header: r.Header}
			}
			a := s.do(r)
			ts.mu.Lock()
			ts.sent++
			switch {
			case a.Err != nil:
				ts.errs = append(ts.errs, fmt.Sprintf("request %d: %v", i, a.Err))
			case a.Status == http.StatusOK:
				ts.ok++
			case a.Status == http.StatusTooManyRequests:
				ts.limited++
			default:
				ts.errs = append(ts.errs, fmt.Sprintf("request %d: status %d", i, a.Status))
			}
			ts.mu.Unlock()
			// Paced, so a bounded loop outlasts the reload.
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return ts, stopAndWait
}

// logins sends n logins from one address and returns the statuses.
func (s *stack) logins(t testing.TB, from string, n int) []int {
	t.Helper()
	var out []int
	for range n {
		out = append(out, s.mustDo(t, request{Method: http.MethodPost, Path: "/api/login", From: from}).Status)
	}
	return out
}

// TestReloadUnderTraffic changes a rule file while Envoy sends traffic
// (login_per_minute 5 → 2 a minute): a new client address gets the new
// limit, and no request errs during the reload: no transport error, no
// status but 200 or 429, and no call Envoy had to fail open
// (ratelimit.error and failure_mode_allowed stay 0, since fail-open hides
// an envoy-rls error behind a 200).
func TestReloadUnderTraffic(t *testing.T) {
	for _, st := range stores {
		t.Run(string(st), func(t *testing.T) {
			s := startStack(t, stackOpts{Store: st})
			if got := fmt.Sprint(s.logins(t, "127.0.0.90", 6)); got != "[200 200 200 200 200 429]" {
				t.Fatalf("logins before the reload: %s, want 5 passing", got)
			}
			ts, stop := s.background(t, 5000)
			// Traffic before the change.
			deadline := time.Now().Add(30 * time.Second)
			for ts.count() < 50 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			reloads := s.metricValue(t, "envoy_rls_config_reloads_total")
			ts.mark()
			writeRules(t, s.RulesDir, withLimits(t, exampleRules(t), map[string]limitSpec{"login_per_minute": {RPU: 2, Unit: "minute"}}))
			for s.metricValue(t, "envoy_rls_config_reloads_total") == reloads {
				if time.Now().After(deadline) {
					t.Fatal("envoy-rls did not reload the changed rules within 30s")
				}
				time.Sleep(20 * time.Millisecond)
			}
			if v := s.metricValue(t, "envoy_rls_config_last_reload_successful"); v != 1 {
				t.Fatalf("envoy_rls_config_last_reload_successful = %v after the change", v)
			}
			if got := fmt.Sprint(s.logins(t, "127.0.0.91", 3)); got != "[200 200 429]" {
				t.Errorf("logins from a new address after the reload: %s, want 2 passing", got)
			}
			// Traffic after the change, then stop it.
			after := ts.count()
			for ts.count() < after+50 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			stop()

			ts.mu.Lock()
			defer ts.mu.Unlock()
			if ts.sentAtMark < 50 || ts.sent < ts.sentAtMark+50 {
				t.Errorf("background traffic: %d before the change, %d in all; want 50 on each side", ts.sentAtMark, ts.sent)
			}
			if len(ts.errs) > 0 {
				t.Errorf("%d of %d background requests erred during the reload, first: %v", len(ts.errs), ts.sent, ts.errs[:min(5, len(ts.errs))])
			}
			for _, stat := range []string{"cluster.echo.ratelimit.error", "cluster.echo.ratelimit.failure_mode_allowed"} {
				if n := s.envoyStat(t, stat); n != 0 {
					t.Errorf("Envoy's %s = %d, want 0", stat, n)
				}
			}
			t.Logf("background: %d sent (%d before the change), %d passed, %d limited", ts.sent, ts.sentAtMark, ts.ok, ts.limited)
		})
	}
}

// count returns how many requests were sent so far.
func (ts *trafficStats) count() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.sent
}

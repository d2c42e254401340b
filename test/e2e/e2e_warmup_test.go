package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
)

// The e2e ramp: 20 per second, from 0.25 over 4 s, on fixed_window so that
// each second's admitted hits are one window's count.
const (
	warmLimit  = 20
	warmFrom   = 0.25
	warmPeriod = 4 * time.Second
)

var warmupRules = map[string]string{"warm.yaml": `
domain: warm
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 20, algorithm: fixed_window, warmup: {period: 4s, from: 0.25}}
`}

// warmSkew is how far a replica's view of the anchor may be from Redis's.
// A replica reads the anchor on its own clock, corrected by Redis TIME read
// in the same call; that correction errs by up to half the call's round
// trip, so near a step of the ramp (one every 4s/15) a replica may already
// be one request ahead of the bound Redis's anchor gives. This machine's
// clocks are one, but the estimate still errs; 100 ms covers a loaded
// machine's round trips and never allows more than one request.
const warmSkew = 100 * time.Millisecond

// warmBound is the ramp's limit at t: what no window ending at t may
// exceed.
func warmBound(anchor, t time.Time) int {
	f := warmFrom + (1-warmFrom)*min(1, max(0, float64(t.Sub(anchor))/float64(warmPeriod)))
	return max(1, int(math.Floor(warmLimit*f)))
}

// TestWarmupTwoReplicas: two envoy-rls processes on one Redis ramp one
// limit together. The first request anchors the ramp in Redis (one key,
// Redis TIME); both replicas then admit, second by second, no more than the
// ramp's bound, and the full limit once it is over; statuses, headers and
// /debug/config show the effective limit; and a replica started after the
// ramp follows the same anchor instead of ramping again.
func TestWarmupTwoReplicas(t *testing.T) {
	t.Parallel()
	r := redistest.Standalone(t)
	dir := rulesDir(t, warmupRules)
	args := []string{"--redis-url", "redis://" + r.Addr, "--response-headers", "legacy"}
	replicas := []*server{startServer(t, serveOpts{ConfigDir: dir, Args: args}), startServer(t, serveOpts{ConfigDir: dir, Args: args})}

	replicas[0].ask("warm", desc("k", "v"))
	anchor := warmAnchor(t, r)
	// While the ramp runs, /debug/config shows the limit in force.
	before := time.Now()
	eff := debugEffective(t, replicas[0])
	if lo, hi := warmBound(anchor, before.Add(-warmSkew)), warmBound(anchor, time.Now().Add(warmSkew)); eff != warmBound(anchor, anchor) && (eff < lo || eff > hi) {
		t.Errorf("/debug/config: effective limit %d, want the ramp's %d..%d", eff, lo, hi)
	}

	// Load: one sequential client per replica, bounded in count and in
	// time (until a second past the ramp's end).
	end := anchor.Add(warmPeriod + 1500*time.Millisecond)
	var mu sync.Mutex
	perWindow := map[int64]int{} // window end (Unix s) → admitted
	// ambiguous counts, per window that may hold them, the admitted hits
	// whose window the answer cannot name: decided within a moment of a
	// window's edge, their whole-second reset fits either window.
	ambiguous := map[int64]int{}
	var wg sync.WaitGroup
	for _, s := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200000 && time.Now().Before(end); i++ {
				sent := time.Now()
				resp, err := s.rls().ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "warm", Descriptors: []*rlv3.RateLimitDescriptor{desc("k", "v")}})
				got := time.Now()
				if err != nil {
					t.Errorf("ShouldRateLimit: %v", err)
					return
				}
				st := resp.Statuses[0]
				if st.Code != pb.RateLimitResponse_OK {
					continue
				}
				checkWarmStatus(t, resp, anchor, sent, got)
				lo, hi := windowEnds(sent, got, st.DurationUntilReset.AsDuration())
				mu.Lock()
				if lo == hi {
					perWindow[lo]++
				} else {
					for w := lo; w <= hi; w++ {
						ambiguous[w]++
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()

	full := false
	t.Logf("admitted per window (end's offset from the anchor → count): %s", windowsLog(anchor, perWindow))
	for w, n := range perWindow {
		b := warmBound(anchor, time.Unix(w, 0).Add(warmSkew))
		if n > b {
			t.Errorf("window ending %s (%.2fs into the ramp): %d admitted, above the ramp's %d",
				time.Unix(w, 0).UTC().Format(time.TimeOnly), time.Unix(w, 0).Sub(anchor).Seconds(), n, b)
		}
		// A window wholly after the ramp admits the full limit: the load
		// is thousands of requests a second against 20.
		if time.Unix(w-1, 0).After(anchor.Add(warmPeriod)) && n <= warmLimit && n+ambiguous[w] >= warmLimit {
			full = true
		}
	}
	if !full {
		t.Errorf("no window after the ramp admitted the full %d: %v", warmLimit, perWindow)
	}

	later := startServer(t, serveOpts{ConfigDir: dir, Args: args})
	checkLaterReplica(t, later)
	if keys := r.Client(t).Keys(context.Background(), "r2w{*").Val(); len(keys) != 1 {
		t.Errorf("anchor keys %q, want one for the three replicas", keys)
	}
}

// TestWarmupRestartsOnReload: a reload that changes a ramped limit starts
// its ramp again from a new anchor, while the old one stays as it was.
func TestWarmupRestartsOnReload(t *testing.T) {
	t.Parallel()
	ramp := func(rpu int, period string) string {
		return fmt.Sprintf("domain: warm\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: %d, algorithm: fixed_window, warmup: {period: %s, from: 0.25}}\n", rpu, period)
	}
	r := redistest.Standalone(t)
	dir := rulesDir(t, map[string]string{"warm.yaml": ramp(20, "1s")})
	s := startServer(t, serveOpts{ConfigDir: dir, Args: []string{"--redis-url", "redis://" + r.Addr}})
	limitNow := func() uint32 {
		return s.ask("warm", checkOnly(desc("k", "v"))).Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	// The first ramp (1 s) ends: the full 20.
	awaitRampLimit(t, limitNow, func(l uint32) bool { return l == 20 }, "the first ramp to end at 20")
	// The limit changes to 24, ramping over an hour: it starts again at 6,
	// from an anchor set after the change.
	first := warmAnchor(t, r)
	changed := time.Now()
	writeFile(t, filepath.Join(dir, "warm.yaml"), ramp(24, "1h"))
	if l := awaitRampLimit(t, limitNow, func(l uint32) bool { return l != 20 }, "the reload"); l != 6 {
		t.Errorf("current_limit %d after the reload, want the new ramp's start 6", l)
	}
	keys := r.Client(t).Keys(context.Background(), "r2w{warm:*").Val()
	if len(keys) != 2 {
		t.Fatalf("anchor keys %q, want one per definition", keys)
	}
	for _, k := range keys {
		us, _ := strconv.ParseInt(r.Client(t).Get(context.Background(), k).Val(), 10, 64)
		if a := time.UnixMicro(us); !a.Equal(first) && a.Before(changed) {
			t.Errorf("anchor %s is %v, before the change at %v: want the new ramp anchored after it", k, a, changed)
		}
	}
}

// awaitRampLimit polls limit until done accepts it, within pollTimeout (a
// liveness bound: reloads and anchor fetches take milliseconds).
func awaitRampLimit(t *testing.T, limit func() uint32, done func(uint32) bool, what string) uint32 {
	t.Helper()
	deadline := time.Now().Add(pollTimeout)
	for {
		l := limit()
		if done(l) {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s; current_limit is %d", pollTimeout, what, l)
		}
		time.Sleep(pollInterval)
	}
}

// warmAnchor waits for the ramp's anchor key in Redis and returns it.
func warmAnchor(t *testing.T, r *redistest.Server) time.Time {
	t.Helper()
	c := r.Client(t)
	ctx := context.Background()
	deadline := time.Now().Add(pollTimeout)
	for {
		keys, err := c.Keys(ctx, "r2w{warm:*").Result()
		if err == nil && len(keys) == 1 {
			v, err := c.Get(ctx, keys[0]).Result()
			us, perr := strconv.ParseInt(v, 10, 64)
			if err != nil || perr != nil {
				t.Fatalf("anchor %s holds %q, %v", keys[0], v, err)
			}
			if ttl := c.PTTL(ctx, keys[0]).Val(); ttl <= warmPeriod {
				t.Errorf("anchor TTL %v, want longer than the ramp", ttl)
			}
			return time.UnixMicro(us)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no anchor key r2w{warm:*} in Redis after the first request: %q, %v", keys, err)
		}
		time.Sleep(pollInterval)
	}
}

// windowEnds returns the ends (Unix s) of the fixed windows an admitted
// hit may have gone into, lo = hi when the answer names one. The replica
// decided it reset before the window's end, a whole second, rounded up to
// whole seconds (duration_until_reset, as Envoy's header carries it), on
// Redis's clock as it tracks it (one host, one clock): a hit decided
// within the call's latency of a window's edge fits either window.
func windowEnds(sent, got time.Time, reset time.Duration) (lo, hi int64) {
	// Decided at some t in [sent, got], with reset = ⌈end − t⌉ whole
	// seconds: the window's end is a whole second in (sent + reset − 1s,
	// got + reset].
	lo = int64(math.Floor(float64(sent.Add(reset-time.Second).UnixMicro())/1e6)) + 1
	hi = int64(math.Floor(float64(got.Add(reset).UnixMicro()) / 1e6))
	return lo, max(lo, hi)
}

// checkWarmStatus: the status reports the ramp's effective limit (between
// the bounds at sent and at got, or the ramp's start while the replica
// still fetches the anchor) and the legacy header says the same.
func checkWarmStatus(t *testing.T, resp *pb.RateLimitResponse, anchor, sent, got time.Time) {
	t.Helper()
	cur := int(resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit())
	lo, hi := warmBound(anchor, sent.Add(-warmSkew)), warmBound(anchor, got.Add(warmSkew))
	if cur != warmBound(anchor, anchor) && (cur < lo || cur > hi) {
		t.Errorf("current_limit %d, want the ramp's %d..%d", cur, lo, hi)
	}
	header := ""
	for _, h := range resp.GetResponseHeadersToAdd() {
		if h.Key == "X-RateLimit-Limit" {
			header = h.Value
		}
	}
	if header != strconv.Itoa(cur) {
		t.Errorf("X-RateLimit-Limit %q, current_limit %d: want the same", header, cur)
	}
}

// checkLaterReplica: a replica started after the ramp reports the full
// limit, in statuses and /debug/config, as soon as it has the anchor; one
// that anchored anew would report the ramp's start and then a value below
// the limit for the ramp's length.
func checkLaterReplica(t *testing.T, s *server) {
	t.Helper()
	start := uint32(warmBound(time.Time{}, time.Time{}))
	cur := awaitRampLimit(t, func() uint32 {
		return s.ask("warm", checkOnly(desc("k", "v"))).Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
	}, func(l uint32) bool { return l != start }, "the later replica to fetch the anchor")
	if cur != warmLimit {
		t.Fatalf("later replica: current_limit %d once it had the anchor, want the full %d", cur, warmLimit)
	}
	if eff := debugEffective(t, s); eff != warmLimit {
		t.Errorf("later replica: /debug/config shows effective limit %d, want %d", eff, warmLimit)
	}
}

// debugEffective returns the ramped limit's effective value from
// /debug/config, after checking the dump shows its warmup block.
func debugEffective(t *testing.T, s *server) int {
	t.Helper()
	code, body := s.getDebug("/debug/config")
	var dump struct {
		Domains []struct {
			Rules []struct {
				Limits []struct {
					Effective *int `json:"effective_requests_per_unit"`
					Warmup    *struct {
						Period string
						From   float64
					}
				}
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &dump); code != 200 || err != nil || len(dump.Domains) != 1 {
		t.Fatalf("/debug/config: %d, %v: %s", code, err, body)
	}
	l := dump.Domains[0].Rules[0].Limits[0]
	if l.Effective == nil || l.Warmup == nil || l.Warmup.Period != "4s" || l.Warmup.From != warmFrom {
		t.Fatalf("/debug/config limit %s, want an effective limit and the warmup block", body)
	}
	return *l.Effective
}

// windowsLog renders the per-window counts in time order.
func windowsLog(anchor time.Time, perWindow map[int64]int) string {
	ends := make([]int64, 0, len(perWindow))
	for w := range perWindow {
		ends = append(ends, w)
	}
	slices.Sort(ends)
	var b strings.Builder
	for _, w := range ends {
		fmt.Fprintf(&b, " %+.2fs→%d (bound %d)", time.Unix(w, 0).Sub(anchor).Seconds(), perWindow[w], warmBound(anchor, time.Unix(w, 0).Add(warmSkew)))
	}
	return b.String()
}

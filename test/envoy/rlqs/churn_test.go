package rlqs

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// soak is how long TestRLQSChurnSoak churns: about a minute in make test,
// longer by hand (go test ./test/envoy/rlqs -run ChurnSoak -rlqs.soak=10m
// -timeout 30m).
var soak = flag.Duration("rlqs.soak", time.Minute, "how long TestRLQSChurnSoak opens new RLQS buckets")

// Churn settings: every request through every Envoy is a bucket of its
// own (a new x-client), the example's 20/s per client rule.
const (
	churnPerEnvoy = 10 // new buckets per second per Envoy
	churnEnvoys   = 3
	// idleAfter is when an idle 20/s bucket is abandoned: its 15 s TTL (it
	// refills in a second). Envoy reports every 5 s, so a bucket lives at
	// most idleAfter + an interval; 5 s more absorb a late report.
	idleAfter = 15 * time.Second
	// warmUp is when the live set has reached its steady state: the
	// first TTL, an interval, and the usage hashes' expiry of the first
	// buckets' last writes.
	warmUp = 30 * time.Second
)

// TestRLQSChurnSoak: three Envoys open a new bucket per request at a
// steady rate for the soak's length. After the first TTL the replicas'
// live buckets (envoy_rls_rlqs_buckets and /debug/config), the RLQS keys
// in Redis, the Redis reads per second (what refresh costs) and the
// replicas' heap after a GC stay within a bound that depends on the rate
// and the forgetting rule, not on how long the churn runs. Before issue
// 39 they all grew with every bucket ever seen.
func TestRLQSChurnSoak(t *testing.T) {
	g := startRig(t, churnEnvoys, "", "--pprof")
	rate := churnPerEnvoy * churnEnvoys
	bound := int(float64(rate) * (idleAfter + reportInterval + reportInterval).Seconds())
	rdb := g.Redis.Client(t)

	var sent atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range churnEnvoys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.churn(i, churnPerEnvoy, stop, &sent)
		}()
	}
	defer func() { close(stop); wg.Wait() }()

	type sample struct {
		at                   time.Duration
		live, listed, keys   int
		heapMiB              float64
		hgetallPerS, roundMS float64
	}
	var samples []sample
	start := time.Now()
	lastCalls := hgetallCalls(t, rdb)
	lastRefresh := g.refreshTotals(t)
	lastAt := start
	for tick := time.NewTicker(reportInterval); time.Since(start) < *soak; {
		<-tick.C
		now := time.Now()
		calls := hgetallCalls(t, rdb)
		refresh := g.refreshTotals(t)
		s := sample{
			at:          now.Sub(start).Round(time.Second),
			live:        int(g.metricSum(t, "envoy_rls_rlqs_buckets")),
			listed:      g.listedAssignments(t),
			keys:        countKeys(t, rdb, "*rlqs:*"),
			heapMiB:     g.heapAfterGC(t) / (1 << 20),
			hgetallPerS: float64(calls-lastCalls) / now.Sub(lastAt).Seconds(),
		}
		if n := refresh.count - lastRefresh.count; n > 0 {
			s.roundMS = (refresh.sum - lastRefresh.sum) / n * 1000
		}
		lastCalls, lastRefresh, lastAt = calls, refresh, now
		samples = append(samples, s)
		t.Logf("t=%v sent=%d live buckets=%d (debug/config %d) redis rlqs keys=%d heap after GC=%.1f MiB hgetall/s=%.0f refresh round=%.2f ms",
			s.at, sent.Load(), s.live, s.listed, s.keys, s.heapMiB, s.hgetallPerS, s.roundMS)
	}
	if sent.Load() < int64(float64(rate)*soak.Seconds()/2) {
		t.Fatalf("only %d requests sent in %v at %d/s: the churn did not run", sent.Load(), *soak, rate)
	}
	// The heap is compared with its value at the end of the warm-up: the
	// buckets' share of it is bounded by the live set, which is flat.
	var heapWarm float64
	for _, s := range samples {
		if s.at < warmUp {
			continue
		}
		if heapWarm == 0 {
			heapWarm = s.heapMiB
		}
		if s.live > bound || s.listed > bound || s.keys > bound {
			t.Errorf("t=%v: %d live buckets (%d listed), %d Redis keys; want at most %d (%d/s over %v)",
				s.at, s.live, s.listed, s.keys, bound, rate, idleAfter+2*reportInterval)
		}
		// Refresh reads each live bucket's demand once a second on each
		// replica; reports read theirs too (a first report per bucket, a
		// periodic one every 5 s).
		if maxReads := float64(bound) * 1.5; s.hgetallPerS > maxReads {
			t.Errorf("t=%v: %.0f HGETALL/s; want at most %.0f (the live buckets' refresh and reports)", s.at, s.hgetallPerS, maxReads)
		}
		if s.heapMiB > heapWarm*1.5+4 {
			t.Errorf("t=%v: heap after GC %.1f MiB, want at most 1.5× the %.1f MiB at the end of the warm-up + 4 MiB", s.at, s.heapMiB, heapWarm)
		}
	}
}

// churn sends requests through Envoy i, each with a new x-client, at
// perSecond until stop (a few workers: one slow answer does not stall the
// rate, which is an upper bound).
func (g *rig) churn(i, perSecond int, stop <-chan struct{}, sent *atomic.Int64) {
	work := make(chan string, 8)
	var wg sync.WaitGroup
	defer wg.Wait()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range work {
				g.get(i, "/api", c)
			}
		}()
	}
	defer close(work)
	tick := time.NewTicker(time.Second / time.Duration(perSecond))
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		case <-tick.C:
			select {
			case work <- fmt.Sprintf("churn-%d-%d", i, n):
				sent.Add(1)
			default:
			}
		}
	}
}

// metricSum sums every series of the metric name over the replicas; -1
// (and a test error) when none exports it.
func (g *rig) metricSum(t *testing.T, name string) float64 {
	t.Helper()
	var sum float64
	found := false
	for i := range g.Replicas {
		v, ok := metricValue(g.metrics(t, i), name)
		found = found || ok
		sum += v
	}
	if !found {
		t.Errorf("no replica exports %s", name)
		return -1
	}
	return sum
}

// metricValue sums the series of name in a /metrics text.
func metricValue(text, name string) (float64, bool) {
	var sum float64
	found := false
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		sum += v
		found = true
	}
	return sum, found
}

// refreshTotals are the refresh histogram's sum and count over the
// replicas.
type refreshTotals struct{ sum, count float64 }

func (g *rig) refreshTotals(t *testing.T) refreshTotals {
	t.Helper()
	return refreshTotals{g.metricSum(t, "envoy_rls_rlqs_refresh_seconds_sum"), g.metricSum(t, "envoy_rls_rlqs_refresh_seconds_count")}
}

// listedAssignments counts the assignments /debug/config lists over the
// replicas.
func (g *rig) listedAssignments(t *testing.T) int {
	t.Helper()
	n := 0
	for _, r := range g.Replicas {
		resp, err := http.Get("http://" + r.DebugAddr + "/debug/config")
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		n += strings.Count(string(b), `"instance":`)
	}
	return n
}

// heapAfterGC is the replicas' summed heap in use right after a garbage
// collection (/debug/pprof/heap?gc=1 runs one), so that it measures what
// is live, not when the collector last ran.
func (g *rig) heapAfterGC(t *testing.T) float64 {
	t.Helper()
	var sum float64
	for i, r := range g.Replicas {
		resp, err := http.Get("http://" + r.DebugAddr + "/debug/pprof/heap?gc=1")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		v, ok := metricValue(g.metrics(t, i), "go_memstats_heap_inuse_bytes")
		if !ok {
			t.Fatal("no go_memstats_heap_inuse_bytes")
		}
		sum += v
	}
	return sum
}

// hgetallCalls is Redis's count of HGETALL calls (INFO commandstats): the
// RLQS demand reads, of refresh and of reports.
func hgetallCalls(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_hgetall:calls=")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
		if err != nil {
			t.Fatalf("INFO commandstats: %q: %v", line, err)
		}
		return n
	}
	return 0
}

// countKeys counts the keys matching pattern.
func countKeys(t *testing.T, rdb *redis.Client, pattern string) int {
	t.Helper()
	n := 0
	iter := rdb.Scan(context.Background(), 0, pattern, 1000).Iterator()
	for iter.Next(context.Background()) {
		n++
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

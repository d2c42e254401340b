package rlqs

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/internal/rulestest"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// These tests drive the server through StreamRateLimitQuotas with a
// stream of their own (the gRPC transport adds nothing they look at), so
// the handler, its goroutines and refresh run as in production while the
// test sets the clock.

// syncClock is a test clock that handlers may read while the test moves
// it.
type syncClock struct{ ns atomic.Int64 }

func newSyncClock() *syncClock {
	c := &syncClock{}
	c.ns.Store(time.Unix(1_800_000_000, 0).UnixNano())
	return c
}

func (c *syncClock) Now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *syncClock) Add(d time.Duration) { c.ns.Add(int64(d)) }

// testStream is one Envoy's end of a stream: reports go in, responses come
// out. With block set, Send waits until block is closed, as it does for
// an Envoy that stopped reading (HTTP/2 flow control).
type testStream struct {
	grpc.ServerStream // nil: the server uses Context, Recv and Send only
	ctx               context.Context
	in                chan *rlqspb.RateLimitQuotaUsageReports
	out               chan *rlqspb.RateLimitQuotaResponse
	block             chan struct{}
	blocked           chan struct{} // closed when a Send first waits on block
	blockedOnce       atomic.Bool
}

func (f *testStream) Context() context.Context { return f.ctx }

func (f *testStream) Recv() (*rlqspb.RateLimitQuotaUsageReports, error) {
	select {
	case m := <-f.in:
		return m, nil
	case <-f.ctx.Done():
		return nil, io.EOF
	}
}

func (f *testStream) Send(r *rlqspb.RateLimitQuotaResponse) error {
	if f.block != nil {
		if f.blockedOnce.CompareAndSwap(false, true) {
			close(f.blocked)
		}
		select {
		case <-f.block:
		case <-f.ctx.Done():
			return io.EOF
		}
	}
	select {
	case f.out <- r:
		return nil
	case <-f.ctx.Done():
		return io.EOF
	}
}

// openStream starts StreamRateLimitQuotas for instance on s; it ends with
// the test.
func openStream(t *testing.T, s *Server, instance string, block chan struct{}) *testStream {
	t.Helper()
	ctx, cancel := context.WithCancel(metadata.NewIncomingContext(context.Background(), metadata.Pairs(InstanceHeader, instance)))
	f := &testStream{ctx: ctx, in: make(chan *rlqspb.RateLimitQuotaUsageReports), out: make(chan *rlqspb.RateLimitQuotaResponse, 64),
		block: block, blocked: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.StreamRateLimitQuotas(f)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return f
}

// guard bounds every wait: it only keeps a broken run from hanging, the
// tests assert what happened, never how fast.
const guard = 30 * time.Second

// exchange sends m and returns the responses up to the one that answers
// m's first bucket.
func (f *testStream) exchange(t *testing.T, m *rlqspb.RateLimitQuotaUsageReports) []*rlqspb.RateLimitQuotaResponse {
	t.Helper()
	select {
	case f.in <- m:
	case <-time.After(guard):
		t.Fatalf("the server did not take a report within %v", guard)
	}
	want := BucketKey(m.GetDomain(), m.GetBucketQuotaUsages()[0].GetBucketId().GetBucket())
	var got []*rlqspb.RateLimitQuotaResponse
	for {
		select {
		case r := <-f.out:
			got = append(got, r)
			for _, a := range r.GetBucketAction() {
				if BucketKey(m.GetDomain(), a.GetBucketId().GetBucket()) == want {
					return got
				}
			}
		case <-time.After(guard):
			t.Fatalf("no answer for %s within %v", want, guard)
		}
	}
}

// usageReport is a report of buckets, each with n requests over elapsed.
func usageReport(buckets []map[string]string, n uint64, elapsed time.Duration) *rlqspb.RateLimitQuotaUsageReports {
	m := &rlqspb.RateLimitQuotaUsageReports{Domain: "d"}
	for _, b := range buckets {
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: &rlqspb.BucketId{Bucket: b}, TimeElapsed: durationpb.New(elapsed), NumRequestsAllowed: n})
	}
	return m
}

// envoyBuckets is what Envoy 1.40 does with its buckets: it keeps every
// bucket it created and reports each every interval, until the server
// abandons it (docs/rlqs.md, "What Envoy 1.40.0 does").
type envoyBuckets map[string]map[string]string

// apply drops the buckets rs abandon.
func (e envoyBuckets) apply(rs []*rlqspb.RateLimitQuotaResponse) {
	for _, r := range rs {
		for _, a := range r.GetBucketAction() {
			if a.GetAbandonAction() != nil {
				delete(e, BucketKey("d", a.GetBucketId().GetBucket()))
			}
		}
	}
}

func (e envoyBuckets) list() []map[string]string {
	out := make([]map[string]string, 0, len(e))
	for _, b := range e {
		out = append(out, b)
	}
	return out
}

func newForgetServer(t *testing.T, c *syncClock, usage Usage) *Server {
	t.Helper()
	snap := rulestest.Snapshot(t, "rlqs.yaml", testRules, rules.Options{})
	s, err := New(Config{Rules: func() *rules.Snapshot { return snap }, Usage: usage,
		KeyOrder: []string{"name", "client"}, Unknown: DenyAll, FailureMode: DenyAll, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestChurnStaysBounded: one Envoy opens a new bucket every second (a
// bucket per user) for 4 minutes of test clock, reporting every bucket it
// holds every 5 s as Envoy 1.40 does. The buckets the server holds (and
// refreshes), and the buckets its usage store holds, stay within what the
// last idle window opened, however long the churn runs.
func TestChurnStaysBounded(t *testing.T) {
	tests := []struct {
		name  string
		usage func(t *testing.T) (Usage, func() int)
	}{
		{"in process", func(t *testing.T) (Usage, func() int) {
			u := NewMemUsage(UsageTTL(0))
			return u, func() int { u.mu.Lock(); defer u.mu.Unlock(); return len(u.m) }
		}},
		{"redis", func(t *testing.T) (Usage, func() int) {
			r := redistest.SharedStandalone(t)
			c, prefix := r.Client(t), redistest.KeyPrefix(t)
			return NewRedisUsage(c, prefix, UsageTTL(0)), func() int { return countKeys(t, c, prefix+"rlqs:*") }
		}},
	}
	// A bucket with a request at second k is abandoned at the first report
	// at least idleAfter (the 15 s TTL: a 20/s bucket refills in a second)
	// later, so at most idleAfter + one interval of new buckets are live.
	const perSecond, seconds = 1, 240
	bound := perSecond*int((15*time.Second+defaultReportInterval)/time.Second) + 1
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newSyncClock()
			usage, stored := tc.usage(t)
			s := newForgetServer(t, c, usage)
			f := openStream(t, s, "edge-1", nil)
			envoy := envoyBuckets{}
			maxLive, maxStored := 0, 0
			for sec := 1; sec <= seconds; sec++ {
				c.Add(time.Second)
				b := map[string]string{"name": "api", "client": fmt.Sprintf("user-%d", sec)}
				envoy[BucketKey("d", b)] = b
				envoy.apply(f.exchange(t, usageReport([]map[string]string{b}, 1, 0)))
				if sec%5 == 0 {
					envoy.apply(f.exchange(t, usageReport(envoy.list(), 0, defaultReportInterval)))
				}
				s.refresh(context.Background())
				maxLive = max(maxLive, len(s.Assignments()))
				maxStored = max(maxStored, stored())
			}
			t.Logf("after %d s at %d new bucket/s: at most %d buckets live on the server, %d in the usage store; Envoy holds %d",
				seconds, perSecond, maxLive, maxStored, len(envoy))
			if maxLive > bound || maxStored > bound || len(envoy) > bound {
				t.Errorf("live buckets reached %d on the server, %d in the store, %d in Envoy; want at most %d (the last %v of new buckets)",
					maxLive, maxStored, len(envoy), bound, 15*time.Second+defaultReportInterval)
			}
		})
	}
}

// countKeys counts the keys matching pattern.
func countKeys(t *testing.T, c redis.Cmdable, pattern string) int {
	t.Helper()
	n := 0
	iter := c.Scan(context.Background(), 0, pattern, 1000).Iterator()
	for iter.Next(context.Background()) {
		n++
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestForgetRule: an idle bucket is abandoned once its assignment's TTL
// has passed, and a token bucket not before Envoy's bucket would have
// refilled (a per-minute share: a minute); a bucket Envoy stops naming is
// forgotten after a TTL.
func TestForgetRule(t *testing.T) {
	tests := []struct {
		name   string
		bucket map[string]string
		// idle is the first idle time (a multiple of the 5 s interval) at
		// which a report with no requests is answered by abandon.
		idle time.Duration
	}{
		{"a 20/s token bucket: the TTL", alice, 15 * time.Second},
		{"deny all: the TTL", map[string]string{"name": "blocked"}, 15 * time.Second},
		{"allow all: the TTL", map[string]string{"name": "free"}, 15 * time.Second},
		{"60/min, a full bucket of 60: its minute", map[string]string{"name": "slow"}, time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newSyncClock()
			s := newForgetServer(t, c, nil)
			f := openStream(t, s, "edge-1", nil)
			one := []map[string]string{tt.bucket}
			f.exchange(t, usageReport(one, 3, 0))
			start := c.Now()
			for {
				c.Add(defaultReportInterval)
				rs := f.exchange(t, usageReport(one, 0, defaultReportInterval))
				abandoned := envoyBuckets{BucketKey("d", tt.bucket): tt.bucket}
				abandoned.apply(rs)
				idle := c.Now().Sub(start)
				if len(abandoned) == 0 {
					if idle != tt.idle {
						t.Fatalf("abandoned after %v idle, want %v", idle, tt.idle)
					}
					break
				}
				if idle >= tt.idle {
					t.Fatalf("still assigned after %v idle, want abandoned at %v", idle, tt.idle)
				}
			}
			if as := s.Assignments(); len(as) != 0 {
				t.Fatalf("the abandoned bucket is still held: %+v", as)
			}
			// A request re-creates it: answered as a new bucket.
			if rs := f.exchange(t, usageReport(one, 1, 0)); rs[len(rs)-1].GetBucketAction()[0].GetQuotaAssignmentAction() == nil {
				t.Fatalf("the re-created bucket got %v, want an assignment", rs)
			}
		})
	}
	t.Run("unreported for a TTL", func(t *testing.T) {
		c := newSyncClock()
		s := newForgetServer(t, c, nil)
		f := openStream(t, s, "edge-1", nil)
		f.exchange(t, usageReport([]map[string]string{alice}, 3, 0))
		c.Add(15 * time.Second)
		s.refresh(context.Background())
		if as := s.Assignments(); len(as) != 1 {
			t.Fatalf("forgotten at the TTL itself: %+v", as)
		}
		c.Add(time.Second)
		s.refresh(context.Background())
		if as := s.Assignments(); len(as) != 0 {
			t.Fatalf("a bucket unreported past its TTL is still held: %+v", as)
		}
	})
}

// TestMemUsageForgetsIdleBuckets: the in-process store deletes a bucket
// nobody reports any more, not only its expired entries.
func TestMemUsageForgetsIdleBuckets(t *testing.T) {
	ttl := UsageTTL(0)
	u := NewMemUsage(ttl)
	now := time.Unix(1_800_000_000, 0)
	ctx := context.Background()
	for i := range 100 {
		if _, err := u.Record(ctx, now, []Report{{Bucket: fmt.Sprintf("b%d", i), Instance: "i", PerSecond: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(ttl + time.Second)
	if _, err := u.Record(ctx, now, []Report{{Bucket: "fresh", Instance: "i", PerSecond: 1}}); err != nil {
		t.Fatal(err)
	}
	if n := len(u.m); n != 1 {
		t.Fatalf("%d buckets held a TTL after 100 went idle, want only the fresh one", n)
	}
}

// TestBlockedSendStallsNothing: an Envoy that stops reading blocks its
// stream's Send; refresh still pushes to the other streams, /debug/config
// still lists the assignments, and the blocked stream's own reports are
// still recorded. When it reads again it gets its newest assignment.
func TestBlockedSendStallsNothing(t *testing.T) {
	c := newSyncClock()
	s := newForgetServer(t, c, nil)
	b := openStream(t, s, "b", nil)
	if rs := b.exchange(t, usageReport([]map[string]string{alice}, 500, 5*time.Second)); tokensOf(rs[len(rs)-1]) != 20 {
		t.Fatalf("b alone: %v, want 20/s", rs)
	}
	release := make(chan struct{})
	a := openStream(t, s, "a", release)
	a.in <- usageReport([]map[string]string{alice}, 500, 5*time.Second)
	select {
	case <-a.blocked:
	case <-time.After(guard):
		t.Fatal("a's answer was never sent")
	}
	// a's Send is blocked. a reports again, later: it must be recorded.
	c.Add(time.Second)
	second := c.Now()
	a.in <- usageReport([]map[string]string{alice}, 250, 5*time.Second)

	done := make(chan []Assignment)
	go func() {
		s.refresh(context.Background())
		done <- s.Assignments()
	}()
	var as []Assignment
	select {
	case as = <-done:
	case <-time.After(guard):
		t.Fatal("refresh and /debug/config made no progress while one stream's Send was blocked")
	}
	if len(as) != 2 {
		t.Fatalf("assignments %+v, want a's and b's", as)
	}
	select {
	case r := <-b.out:
		if tokensOf(r) >= 20 {
			t.Fatalf("b got %v, want its share beside a", r)
		}
	case <-time.After(guard):
		t.Fatal("refresh pushed nothing to b while a was blocked")
	}
	for deadline := time.Now().Add(guard); ; time.Sleep(10 * time.Millisecond) {
		if got := s.Assignments(); len(got) == 2 && (got[0].Sent.Equal(second) || got[1].Sent.Equal(second)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a's second report was not recorded while its Send was blocked")
		}
	}
	close(release)
	var last *rlqspb.RateLimitQuotaResponse
	for last == nil || len(a.out) > 0 {
		select {
		case last = <-a.out:
		case <-time.After(guard):
			t.Fatal("a got nothing once it read again")
		}
	}
	var mine Assignment
	for _, x := range s.Assignments() {
		if x.Instance == "a" {
			mine = x
		}
	}
	if got := tokensOf(last); got != int64(mine.TokensPerFill) {
		t.Fatalf("a's last action has %d tokens per fill, want its newest assignment's %d", got, mine.TokensPerFill)
	}
}

// tokensOf is the tokens per fill of r's first action's token bucket.
func tokensOf(r *rlqspb.RateLimitQuotaResponse) int64 {
	return int64(r.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket().GetTokensPerFill().GetValue())
}

// bucketBytes is the documented bound on what one live bucket of one
// stream costs a replica's heap, usage entry in process included
// (docs/rlqs.md, "Memory").
const bucketBytes = 2048

// TestBucketMemory: a replica's heap grows by at most bucketBytes per
// live bucket (a two-key bucket id of short values, as in the example), so
// the bound in docs/rlqs.md (live buckets × bytes) holds.
func TestBucketMemory(t *testing.T) {
	const n = 20_000
	c := &clock{now: time.Unix(1_800_000_000, 0)}
	s := newTestServer(t, c, nil)
	ss := newStream("edge-1")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		s.handle(context.Background(), ss, usageReport([]map[string]string{{"name": "api", "client": fmt.Sprintf("user-%07d", i)}}, 1, 0))
		ss.take()
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if len(ss.sent) != n {
		t.Fatalf("%d buckets held, want %d", len(ss.sent), n)
	}
	per := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n
	t.Logf("%d bytes of heap per live bucket (%d buckets)", per, n)
	if per > bucketBytes {
		t.Errorf("%d bytes per live bucket, want at most %d (docs/rlqs.md)", per, bucketBytes)
	}
	runtime.KeepAlive(s)
}

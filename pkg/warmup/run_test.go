package warmup

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/envoy-rls/envoy-rls/internal/testkit/eventually"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// countingAnchors is an Anchors that anchors every ramp at start and
// counts its calls.
type countingAnchors struct {
	start time.Time
	calls atomic.Int64
}

func (c *countingAnchors) Anchor(context.Context, string, string, time.Time, time.Duration) (time.Time, error) {
	c.calls.Add(1)
	return c.start, nil
}

// TestFetchesRunInRun: AdjustLimit only queues an unknown anchor, and
// the fetch happens in Run, so the request path starts no goroutine; once
// Run has fetched it the ramp follows the anchor, and Run returns when its
// context ends, leaving nothing behind.
func TestFetchesRunInRun(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	anchors := &countingAnchors{start: t0}
	adj := New(Options{Anchors: anchors})
	w := &rules.Warmup{Period: time.Hour, From: 0.25, Anchor: "a"}
	l := &rules.Limit{Warmup: w, Policy: algo.Policy{Algorithm: algo.FixedWindow, Limit: 1000, Period: algo.Minute}}
	now := t0.Add(30 * time.Minute)
	limit := func() int64 { return adj.AdjustLimit(now, "d", nil, l, l.Policy).Limit }

	if got := limit(); got != 250 {
		t.Fatalf("before Run: limit %d, want the ramp's start 250", got)
	}
	goleak.VerifyNone(t, ignore) // AdjustLimit started nothing
	if n := anchors.calls.Load(); n != 0 {
		t.Fatalf("before Run: %d anchor fetches, want 0", n)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- adj.Run(ctx) }()
	eventually.True(t, "the fetched anchor applies", func() (bool, string) {
		return limit() == 625, ""
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	goleak.VerifyNone(t, ignore)
}

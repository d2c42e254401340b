package backendtest

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// Peeker is a backend that can also read its counters without changing
// them.
type Peeker interface {
	Backend
	Peek(ctx context.Context, at time.Time, checks []algo.Check) ([]algo.Peeked, error)
}

// PeekFactory is Factory for Peekers.
type PeekFactory func(t *testing.T) Peeker

// RunPeek proves, for every algorithm, that Peek reports what Apply left
// (the check-only decision Apply itself gives) and consumes nothing: after
// any number of peeks the limit still admits exactly what it had left.
func RunPeek(t *testing.T, f PeekFactory) {
	for _, a := range algo.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			b := f(t)
			const limit, used int64 = 4, 3
			c := check(t.Name(), algo.Policy{Algorithm: a, Limit: limit, Period: algo.Minute}, 1, "user", "u")
			if p := peek(t, b, c); p.Exists || p.Decision(c.Policy).Remaining != limit {
				t.Fatalf("peek of an unused counter: %+v, want none with remaining %d", p, limit)
			}
			for range used {
				Apply(t, b, Start, c)
			}
			first := peek(t, b, c)
			for range 3 {
				if again := peek(t, b, c); !reflect.DeepEqual(again.State, first.State) || again.Exists != first.Exists {
					t.Fatalf("peek changed the state: %+v then %+v", first, again)
				}
			}
			probe := c
			probe.Hits = 0
			want := Apply(t, b, Start, probe)[0]
			if got := first.Decision(c.Policy); !first.Exists || first.TTL == 0 || got.Remaining != want.Remaining || got.ResetAfter != want.ResetAfter {
				t.Fatalf("peek %+v decides %+v; Apply's check-only decision is %+v", first, got, want)
			}
			// Nothing was consumed: exactly the rest is admitted.
			for i := range limit - used {
				expect(t, Apply(t, b, Start, c)[0], true, limit-used-1-i)
			}
			expect(t, Apply(t, b, Start, c)[0], false, 0)
		})
	}
}

func peek(t *testing.T, b Peeker, c algo.Check) algo.Peeked {
	t.Helper()
	got, err := b.Peek(context.Background(), time.UnixMicro(Start), []algo.Check{c})
	if err != nil {
		t.Fatalf("Peek: %v", err)
	}
	if len(got) != 1 {
		t.Fatalf("Peek returned %d results for 1 check", len(got))
	}
	return got[0]
}

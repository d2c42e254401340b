package backendtest

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// same compares a backend's decision with algo's: all of it when allowed,
// and when denied whether and when it would pass (a deny cache answers a
// cached denial with its own Remaining and ResetAfter). The time the
// backend decided at (At) is the backend's, not algo's: it is not compared.
func same(got, want algo.Decision) bool {
	got.At = want.At
	if want.Allowed {
		return got == want
	}
	return !got.Allowed && got.RetryAfter == want.RetryAfter
}

// subWindows: a sliding window in sub-windows decides on the backend as
// algo.Step does on the same requests at the same times, through the
// backend's own storage of the counts (a Redis value, the in-process
// store's side slice), and a denied request's RetryAfter holds there too.
func subWindows(t *testing.T, f Factory) {
	for _, pol := range []algo.Policy{
		{Algorithm: algo.SlidingWindow, Limit: 20, Period: algo.Second, SubWindows: algo.DefaultSubWindows},
		{Algorithm: algo.SlidingWindow, Limit: 7, Period: 999_983, SubWindows: 7},
	} {
		t.Run(fmt.Sprint(pol.SubWindows), func(t *testing.T) {
			b := f(t)
			r := rand.New(rand.NewPCG(uint64(pol.SubWindows), 25))
			c := check(t.Name(), pol, 1, "k", "v")
			var s algo.State
			now := Start + 650_000
			for i := range 400 {
				// One hit each: a deny cache answers a cached denial for
				// the counter whatever the hits.
				now += r.Int64N(pol.Period / pol.Limit * 2)
				var want algo.Decision
				s, want = algo.Step(pol, s, now, c.Hits, false)
				got := Apply(t, b, now, c)[0]
				if !same(got, want) {
					t.Fatalf("request %d at %d: backend %+v, algo %+v", i, now, got, want)
				}
				if !got.Allowed && got.RetryAfter > 0 && r.IntN(4) == 0 {
					// Wait exactly RetryAfter: admitted then.
					now += got.RetryAfter
					s, want = algo.Step(pol, s, now, 1, false)
					if got := Apply(t, b, now, c)[0]; !got.Allowed || !same(got, want) {
						t.Fatalf("after RetryAfter: backend %+v, algo %+v", got, want)
					}
				}
			}
		})
	}
}

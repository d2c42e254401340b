package inspect

import (
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

func TestDescribeSubWindows(t *testing.T) {
	pol := algo.Policy{Algorithm: algo.SlidingWindow, Limit: 10, Period: algo.Second, SubWindows: 4}
	for _, tc := range []struct {
		name string
		st   algo.State
		want string
		hits int64
	}{
		{"current only", algo.State{Time: 1_000_000, Subs: []int64{3}}, "4 sub-windows, current at 1970-01-01T00:00:01Z: counts 3 (current first)", 3},
		// The fifth count is the partly overlapping sub-window: shown, not
		// summed.
		{"all five", algo.State{Time: 1_250_000, Subs: []int64{1, 0, 2, 3, 4}}, "4 sub-windows, current at 1970-01-01T00:00:01Z: counts 1 0 2 3 4 (current first)", 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, hits := describeState(pol, tc.st, 0, true)
			if got != tc.want || hits != tc.hits {
				t.Errorf("%q, %d hits; want %q, %d", got, hits, tc.want, tc.hits)
			}
		})
	}
}

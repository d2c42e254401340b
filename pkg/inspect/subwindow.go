package inspect

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// describeSubWindows says what a sliding window in sub-windows holds:
// each sub-window's count, the current one first, and as the hits it
// counts their sum over the N sub-windows inside the period (the oldest,
// partly overlapping one aside, whose weight depends on the time).
func describeSubWindows(pol algo.Policy, st algo.State) (string, int64) {
	n := pol.Windows()
	parts := make([]string, len(st.Subs))
	var sum int64
	for i, c := range st.Subs {
		parts[i] = strconv.FormatInt(c, 10)
		if int64(i) < n {
			sum += c
		}
	}
	return fmt.Sprintf("%d sub-windows, current at %s: counts %s (current first)", n, us(st.Time), strings.Join(parts, " ")), sum
}

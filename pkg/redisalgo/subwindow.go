package redisalgo

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// decodeSubWindows reads the value of a sliding_window with n ≥ 2
// sub-windows, "<h>,<c0>,<c1>…" (apply.lua's loadSubs): h is the absolute
// index of the current sub-window, c0 its count, c1 the one before it, and
// so on; an empty count is 0. The state's Time is sub-window h's start.
func decodeSubWindows(v string, period, n int64) (algo.State, error) {
	fields := strings.Split(v, ",")
	if len(fields) < 2 || int64(len(fields)) > n+2 {
		return algo.State{}, fmt.Errorf("sub-window state %q has %d fields (want the index and 1..%d counts)", v, len(fields), n+1)
	}
	h, err := strconv.ParseUint(fields[0], 10, 63)
	if err != nil {
		return algo.State{}, fmt.Errorf("sub-window state %q: index %q is no integer", v, fields[0])
	}
	subs := make([]int64, len(fields)-1)
	for i, f := range fields[1:] {
		if f == "" {
			continue
		}
		c, err := strconv.ParseUint(f, 10, 63)
		if err != nil {
			return algo.State{}, fmt.Errorf("sub-window state %q: count %d (%q) is no integer", v, i, f)
		}
		subs[i] = int64(c)
	}
	return algo.State{Time: algo.SubWindowStart(int64(h), period, n), Subs: subs}, nil
}

// appendSubWindows appends the key suffix of a policy kept in n ≥ 2
// sub-windows: '/' and n in decimal (s1/30 is a 1 s sliding window in 30
// sub-windows). The two-window sliding_window (n = 1) has none, so its
// keys and values are those it always had.
func appendSubWindows(dst []byte, p algo.Policy) []byte {
	if n := p.Windows(); n > 1 {
		dst = append(dst, '/')
		dst = strconv.AppendInt(dst, n, 10)
	}
	return dst
}

// cutSubWindows splits the sub-window suffix off a key's policy field:
// the number after '/', spelt as appendSubWindows spells it, or 1 when
// there is none.
func cutSubWindows(s string) (rest string, n int64, err error) {
	rest, num, ok := strings.Cut(s, "/")
	if !ok {
		return s, 1, nil
	}
	n, err = strconv.ParseInt(num, 10, 64)
	if err != nil || n < 2 || n > algo.MaxSubWindows || strconv.FormatInt(n, 10) != num {
		return s, 0, fmt.Errorf("bad sub-window count in %q (want 2..%d)", s, algo.MaxSubWindows)
	}
	return rest, n, nil
}

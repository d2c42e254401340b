package redisalgo

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// decodeSubWindows reads the value of a sliding_window with n ≥ 2
// sub-windows, "<h>:<w><c0><c1>…" (apply.lua's loadSubs): h is the
// absolute index of the current sub-window in base 36, w (1-9) the number
// of base-36 digits of each count, c0 its count, c1 the one before it, and
// so on. The state's Time is sub-window h's start.
func decodeSubWindows(v string, period, n int64) (algo.State, error) {
	hs, rest, ok := strings.Cut(v, ":")
	if !ok || len(rest) < 2 || rest[0] < '1' || rest[0] > '9' || !isBase36(hs) || !isBase36(rest[1:]) {
		return algo.State{}, fmt.Errorf("sub-window state %q is not \"<index>:<width><counts>\" in base 36", v)
	}
	w, digits := int(rest[0]-'0'), rest[1:]
	if len(digits)%w != 0 || int64(len(digits)/w) > n+1 {
		return algo.State{}, fmt.Errorf("sub-window state %q: %d digits are not 1..%d counts of %d", v, len(digits), n+1, w)
	}
	h, err := strconv.ParseInt(hs, 36, 64)
	if err != nil {
		return algo.State{}, fmt.Errorf("sub-window state %q: index %q: %w", v, hs, err)
	}
	subs := make([]int64, len(digits)/w)
	for i := range subs {
		if subs[i], err = strconv.ParseInt(digits[i*w:(i+1)*w], 36, 64); err != nil {
			return algo.State{}, fmt.Errorf("sub-window state %q: count %d: %w", v, i, err)
		}
	}
	return algo.State{Time: algo.SubWindowStart(h, period, n), Subs: subs}, nil
}

// isBase36 reports whether s is non-empty and all lowercase base-36 digits.
func isBase36(s string) bool {
	return s != "" && strings.Trim(s, "0123456789abcdefghijklmnopqrstuvwxyz") == ""
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

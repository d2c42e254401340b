package redisalgo

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

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

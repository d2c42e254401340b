package algo

import (
	"fmt"
	"strconv"
	"strings"
)

// The state codec: how a State is stored as one string value (every shape
// but the log) or as a sorted set (the log), the format pkg/redisalgo's
// apply.lua reads and writes (its header describes the bytes). The Lua
// script is the writer on the request path; EncodeState and EncodeLog are
// its Go twins, which tests and tools use and TestCodecRoundTrip holds to
// DecodeState. The period is part of a limit's key, so a window value
// stores its index and reads back with the period. A fixed_window's index
// is part of where it is stored too (one hash per window, KeyedWindow), so
// its value is the count alone: what Redis's HINCRBY reads and writes,
// which lets a lone check skip the script (pkg/redisalgo's plain calls).

// maxPacked bounds the counts a packed window value holds: one length
// digit each, so at most 9 digits.
const maxPacked = 1_000_000_000

// EncodeState returns the string value that stores s for a limit with
// policy p (only Algorithm, Period and SubWindows matter), as apply.lua's
// stateValue writes it. A sliding log has none: see EncodeLog.
func EncodeState(p Policy, s State) (string, error) {
	switch spec := p.Algorithm.spec(); {
	case p.KeyedWindow():
		return strconv.FormatInt(s.Count, 10), nil
	case spec.Shape == ShapeWindow && p.Windows() > 1:
		return encodeSubWindows(s, p.Period, p.Windows()), nil
	case spec.Shape == ShapeWindow:
		return encodeWindow(s, p.Period), nil
	case spec.Shape == ShapeBucket && s.Frac == 0:
		return strconv.FormatInt(s.Time, 10), nil
	case spec.Shape == ShapeBucket:
		return strconv.FormatInt(s.Time, 10) + ":" + strconv.FormatInt(s.Frac, 10), nil
	}
	return "", fmt.Errorf("no string state for algorithm %s", p.Algorithm)
}

// DecodeState reads a string state value written for a limit with policy p
// (only Algorithm, Period and SubWindows matter): the inverse of
// EncodeState, as apply.lua's load reads it. A sliding log is a sorted
// set: see DecodeLog. A fixed_window's value is its count: the State's
// Time is 0, and the caller sets it to the start of the window the key
// names (KeyedWindow).
func DecodeState(p Policy, v string) (State, error) {
	switch spec := p.Algorithm.spec(); {
	case p.KeyedWindow():
		c, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return State{}, fmt.Errorf("fixed_window state %q is no integer count", v)
		}
		return State{Count: c}, nil
	case spec.Shape == ShapeWindow && p.Windows() > 1:
		return decodeSubWindows(v, p.Period, p.Windows())
	case spec.Shape == ShapeWindow:
		start, c, prev, err := decodeWindow(v)
		if err != nil {
			return State{}, err
		}
		return State{Time: start * p.Period, Count: c, Prev: prev}, nil
	case spec.Shape == ShapeBucket:
		t, f, _, err := decodeFields(v, 2)
		return State{Time: t, Frac: f}, err
	}
	return State{}, fmt.Errorf("no string state for algorithm %s", p.Algorithm)
}

// LogEntry is one member of a sliding log's sorted set: Score is the hit's
// time, Member "<time>:<n>" with n (six digits) numbering the hits of one
// µs, so that members of equal score sort by n.
type LogEntry struct {
	Score  int64
	Member string
}

// EncodeLog returns the sorted-set members that store s.Log, as apply.lua
// adds them.
func EncodeLog(s State) []LogEntry {
	out := make([]LogEntry, len(s.Log))
	n := 0
	for i, t := range s.Log {
		if i > 0 && s.Log[i-1] == t {
			n++
		} else {
			n = 0
		}
		out[i] = LogEntry{Score: t, Member: fmt.Sprintf("%d:%06d", t, n)}
	}
	return out
}

// DecodeLog is the State of a sliding log read as its members' scores in
// ascending order: one entry per admitted hit.
func DecodeLog(times []int64) State {
	if len(times) == 0 {
		return State{}
	}
	return State{Log: times}
}

// LogLiveAfter returns the time after which a sliding log's entries still
// count at now: entries scored at most it have left the period (apply.lua
// removes them with ZREMRANGEBYSCORE -inf it).
func LogLiveAfter(p Policy, now int64) int64 { return now - p.Period }

// KeyedWindow reports whether p's state is stored per window, the window
// named where it is stored and the value holding the count alone: a
// fixed_window. In Redis (pkg/redisalgo) it is a field of a hash whose name
// ends in the window's index (WindowIndex), and a past window's hash is
// never read again, only left to expire.
func (p Policy) KeyedWindow() bool { return p.Algorithm == FixedWindow }

// WindowIndex is the index of the window of period that holds now: the
// window starts at WindowIndex × period.
func WindowIndex(now, period int64) int64 {
	i, _ := divmod(now, period)
	return i
}

// encodeWindow is apply.lua's windowValue for a sliding_window: the window
// index, then the counts packed with their digit counts last, or joined by
// ':' when a count does not fit one digit count.
func encodeWindow(s State, period int64) string {
	i, _ := divmod(s.Time, period)
	packable := func(c int64) bool { return c >= 0 && c < maxPacked }
	digits := func(c int64) string {
		if c == 0 {
			return ""
		}
		return strconv.FormatInt(c, 10)
	}
	idx := strconv.FormatInt(i, 10)
	if !packable(s.Count) || !packable(s.Prev) {
		return idx + ":" + strconv.FormatInt(s.Count, 10) + ":" + strconv.FormatInt(s.Prev, 10)
	}
	c, p := digits(s.Count), digits(s.Prev)
	return idx + c + p + strconv.Itoa(len(c)) + strconv.Itoa(len(p))
}

// encodeSubWindows is apply.lua's subsValue: the index of the sub-window
// starting at s.Time in base 36, ':', the digits per count, then every
// count in that many base-36 digits.
func encodeSubWindows(s State, period, n int64) string {
	m := int64(0)
	for _, c := range s.Subs {
		m = max(m, c)
	}
	w := len(strconv.FormatInt(m, 36))
	h, _, _ := subAt(s.Time, period, n)
	var b strings.Builder
	b.WriteString(strconv.FormatInt(h, 36))
	b.WriteByte(':')
	b.WriteString(strconv.Itoa(w))
	for _, c := range s.Subs {
		d := strconv.FormatInt(c, 36)
		b.WriteString(strings.Repeat("0", w-len(d)))
		b.WriteString(d)
	}
	return b.String()
}

// decodeFields reads "<a>", "<a>:<b>" … up to n integers joined by ':'
// (apply.lua's loadFields); missing ones read as 0.
func decodeFields(v string, n int) (a, b, c int64, err error) {
	parts := strings.Split(v, ":")
	if len(parts) > n {
		return 0, 0, 0, fmt.Errorf("state %q has %d fields (want at most %d)", v, len(parts), n)
	}
	var out [3]int64
	for i, s := range parts {
		if s == "" && i > 0 {
			continue
		}
		if out[i], err = strconv.ParseInt(s, 10, 64); err != nil {
			return 0, 0, 0, fmt.Errorf("state %q: field %d is no integer", v, i)
		}
	}
	return out[0], out[1], out[2], nil
}

// decodeWindow reads a sliding_window value (apply.lua's loadWindow): the
// window index, its count and the previous count; packed, with the counts'
// digit counts at the end, or joined by ':'.
func decodeWindow(v string) (index, count, prev int64, err error) {
	if strings.Contains(v, ":") {
		return decodeFields(v, 3)
	}
	bad := fmt.Errorf("window state %q is not packed as apply.lua packs it", v)
	n := len(v)
	digit := func() int {
		if n < 1 || v[n-1] < '0' || v[n-1] > '9' {
			return -1
		}
		n--
		return int(v[n] - '0')
	}
	take := func(d int) (int64, bool) {
		if d < 0 || d > n {
			return 0, false
		}
		s := v[n-d : n]
		n -= d
		if s == "" {
			return 0, true
		}
		x, err := strconv.ParseInt(s, 10, 64)
		return x, err == nil
	}
	np := digit()
	nc := digit()
	prev, okp := take(np)
	count, okc := take(nc)
	if !okp || !okc || n == 0 {
		return 0, 0, 0, bad
	}
	if index, err = strconv.ParseInt(v[:n], 10, 64); err != nil {
		return 0, 0, 0, bad
	}
	return index, count, prev, nil
}

// decodeSubWindows reads the value of a sliding_window with n ≥ 2
// sub-windows, "<h>:<w><c0><c1>…" (apply.lua's loadSubs): h is the
// absolute index of the current sub-window in base 36, w (1-9) the number
// of base-36 digits of each count, c0 its count, c1 the one before it, and
// so on. The state's Time is sub-window h's start.
func decodeSubWindows(v string, period, n int64) (State, error) {
	hs, rest, ok := strings.Cut(v, ":")
	if !ok || len(rest) < 2 || rest[0] < '1' || rest[0] > '9' || !isBase36(hs) || !isBase36(rest[1:]) {
		return State{}, fmt.Errorf("sub-window state %q is not \"<index>:<width><counts>\" in base 36", v)
	}
	w, digits := int(rest[0]-'0'), rest[1:]
	if len(digits)%w != 0 || int64(len(digits)/w) > n+1 {
		return State{}, fmt.Errorf("sub-window state %q: %d digits are not 1..%d counts of %d", v, len(digits), n+1, w)
	}
	h, err := strconv.ParseInt(hs, 36, 64)
	if err != nil {
		return State{}, fmt.Errorf("sub-window state %q: index %q: %w", v, hs, err)
	}
	subs := make([]int64, len(digits)/w)
	for i := range subs {
		if subs[i], err = strconv.ParseInt(digits[i*w:(i+1)*w], 36, 64); err != nil {
			return State{}, fmt.Errorf("sub-window state %q: count %d: %w", v, i, err)
		}
	}
	return State{Time: subStart(h, period, n), Subs: subs}, nil
}

// isBase36 reports whether s is non-empty and all lowercase base-36 digits.
func isBase36(s string) bool {
	return s != "" && strings.Trim(s, "0123456789abcdefghijklmnopqrstuvwxyz") == ""
}

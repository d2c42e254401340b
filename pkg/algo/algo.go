// Package algo holds the pure rate-limit algorithm cores shared by every
// backend: the Policy that describes one limit, the State a backend stores
// for it, and the Decision a Step returns.
//
// Every function here is pure: it takes the current time as an argument and
// performs no I/O, logging or locking. The Redis Lua scripts in
// pkg/redisalgo mirror these functions operation by operation, so the two
// executors decide identically (a differential test proves it). This package
// must import nothing outside the standard library.
package algo

import (
	"errors"
	"fmt"
	"strings"
)

// Algorithm names one of the supported rate-limit algorithms. The zero value
// is not a valid algorithm; rules resolve it to the server default.
type Algorithm uint8

// The numeric values are part of the Lua script protocol: do not renumber.
const (
	FixedWindow   Algorithm = 1
	SlidingWindow Algorithm = 2
	SlidingLog    Algorithm = 3
	TokenBucket   Algorithm = 4
	GCRA          Algorithm = 5
)

// Algorithms lists every algorithm in protocol order; each has a row in
// the algorithm table (table.go).
var Algorithms = []Algorithm{FixedWindow, SlidingWindow, SlidingLog, TokenBucket, GCRA}

// String returns the configuration name of a, e.g. "token_bucket".
func (a Algorithm) String() string {
	if s, ok := a.Spec(); ok {
		return s.Name
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

// UsesBurst reports whether a's capacity is Policy.Burst (token_bucket and
// gcra) rather than Policy.Limit: Spec.UsesBurst.
func (a Algorithm) UsesBurst() bool { return a.spec().UsesBurst }

// ErrUnknownAlgorithm is returned by ParseAlgorithm for a name it does not know.
var ErrUnknownAlgorithm = errors.New("unknown algorithm")

// ParseAlgorithm returns the Algorithm named s.
func ParseAlgorithm(s string) (Algorithm, error) {
	return parseName(Algorithms, s, ErrUnknownAlgorithm)
}

// AlgorithmNames returns the names of Algorithms joined with "|"
// ("fixed_window|sliding_window|…"), the form every error message and flag
// help uses to list them, so that a new algorithm appears in all of them.
func AlgorithmNames() string { return joinNames(Algorithms) }

// parseName returns the element of list whose String is s, or unknown
// wrapped with s and the names of list.
func parseName[T fmt.Stringer](list []T, s string, unknown error) (T, error) {
	for _, v := range list {
		if v.String() == s {
			return v, nil
		}
	}
	var zero T
	return zero, fmt.Errorf("algo: %w %q (want %s)", unknown, s, joinNames(list))
}

// joinNames returns the Strings of list joined with "|".
func joinNames[T fmt.Stringer](list []T) string {
	names := make([]string, len(list))
	for i, v := range list {
		names[i] = v.String()
	}
	return strings.Join(names, "|")
}

// Policy describes one limit: at most Limit hits per Period.
type Policy struct {
	Algorithm Algorithm
	// Limit is the number of hits allowed per Period. Zero blocks every hit.
	Limit int64
	// Period is the window length in microseconds; it must be positive.
	Period int64
	// Burst is the bucket capacity for token_bucket and gcra; zero means Limit.
	// Other algorithms ignore it.
	Burst int64
	// SubWindows is, for sliding_window, the number of sub-windows its
	// period is counted in (subwindow.go): 0 or 1 keeps the two-window
	// estimate (previous and current window), 2..MaxSubWindows count each
	// sub-window. It is part of the counter identity, since it changes
	// what the state means. Other algorithms must leave it 0.
	SubWindows int64
}

// Decision is the outcome of one Step for one limit.
type Decision struct {
	// Allowed reports whether the hits fit the limit.
	Allowed bool
	// Remaining is how many more hits the limit would admit right now, after
	// this step's hits were consumed (or not, when denied).
	Remaining int64
	// ResetAfter is in microseconds and means the same whatever the
	// decision: the time until the limit next resets if nothing else
	// arrives. For fixed_window and sliding_window that is the end of the
	// current window (a sliding window's hits then fade out over the next
	// one); for sliding_log, token_bucket and gcra, the time until the
	// whole capacity is available again. 0 when the limit holds no hits.
	ResetAfter int64
	// RetryAfter is in microseconds: 0 when Allowed; when denied, the time
	// until this same request would be admitted if nothing else arrives,
	// or Never when no wait would admit it (more hits than the capacity,
	// or a limit of 0).
	RetryAfter int64
	// Granted is how many hits an allowed take (Check.Take) consumed: at
	// least 1, at most its Hits. It is 0 for every other decision.
	Granted int64
	// Delay is in microseconds: 0 unless the request reserved its hits in
	// queue mode (Check.MaxDelay); then it is allowed, to pass Delay µs
	// after now, and every consuming check of the request reports the same
	// Delay. A token_bucket or gcra check's Remaining and ResetAfter then
	// describe the limit at that reserved time.
	Delay int64
	// ReservedAt is now + Delay in Unix µs (the backend's clock) when Delay
	// is positive, else 0: the time a cancellation (Check.ReservedAt) names.
	ReservedAt int64
	// At is the time the decision was made at, in Unix µs on the backend's
	// clock, when the backend decides on a clock of its own (Redis: see
	// Applier); 0 when it decides at the request's now. A refund of the
	// decided hits names it (Check.At), so that it is decided at the same
	// time and lands where the hits went, however late it is sent.
	At int64
}

// Never is the RetryAfter of a denial that no wait would lift.
const Never int64 = -1

package algo

import (
	"errors"
	"fmt"
	"math/bits"
)

// Bounds that keep every algorithm exact in both executors. The Redis
// scripts compute with Lua numbers (IEEE doubles), which hold every integer
// below 2^53 exactly; these bounds keep every intermediate value there (the
// comment on each algorithm says which product it bounds).
const (
	// MaxLimit is the largest Limit: Envoy's requests_per_unit is a uint32.
	// It also bounds sliding_window's products count·2^20 below 2^53.
	MaxLimit int64 = 1<<32 - 1
	// MaxPeriod is the longest Period and the longest time a token bucket
	// or GCRA may take to refill its whole burst: 2^50 µs, about 35 years.
	// Window ends (start + 2·period) then stay below 2^53 for any time
	// before the year 2100.
	MaxPeriod int64 = 1 << 50
	// DefaultSlidingLogCap is the largest sliding_log Limit that Validate
	// accepts. A sliding log stores one entry per admitted hit, so its
	// memory per key is O(Limit).
	DefaultSlidingLogCap int64 = 10_000
	// MaxSlidingLogCap bounds a configured sliding-log cap: the Lua script
	// numbers the entries admitted in one microsecond with six digits.
	MaxSlidingLogCap int64 = 1_000_000

	// exact is 2^53: every integer below it is exact in a double.
	exact int64 = 1 << 53
)

// ErrInvalidPolicy is wrapped by every error Validate returns.
var ErrInvalidPolicy = errors.New("invalid policy")

// ValidateSlidingLogCap reports whether logCap may bound sliding_log
// limits: 1..MaxSlidingLogCap. Every place that accepts a cap (flags,
// rules options, the service) checks it here, so they agree on the range
// and say it in the same words.
func ValidateSlidingLogCap(logCap int64) error {
	if problem := logCapProblem(logCap); problem != "" {
		return errors.New("algo: " + problem)
	}
	return nil
}

// logCapProblem says what is wrong with logCap, or "" when nothing is.
func logCapProblem(logCap int64) string {
	if logCap < 1 || logCap > MaxSlidingLogCap {
		return fmt.Sprintf("sliding-log cap %d (want 1..%d)", logCap, MaxSlidingLogCap)
	}
	return ""
}

// Capacity returns the most hits p can admit at once: Burst (or Limit when
// Burst is 0) for token_bucket and gcra, Limit for the other algorithms.
// Decision.Remaining never exceeds it.
func (p Policy) Capacity() int64 {
	if p.Algorithm.UsesBurst() && p.Burst > 0 && p.Limit > 0 {
		return p.Burst
	}
	return p.Limit
}

// Validate reports whether Step computes p exactly, with the sliding-log
// cap DefaultSlidingLogCap. See ValidateWithLogCap.
func (p Policy) Validate() error { return p.ValidateWithLogCap(DefaultSlidingLogCap) }

// ValidateWithLogCap reports every reason why p is not a policy that Step
// and the Lua script compute exactly (and identically), with logCap as the
// largest sliding_log Limit (1..MaxSlidingLogCap). Each error wraps
// ErrInvalidPolicy; several are joined with errors.Join.
//
// A Limit of 0 is valid and blocks every hit (the Burst is then ignored).
// Step never panics on a policy that fails Validate, but its decisions are
// then unspecified.
func (p Policy) ValidateWithLogCap(logCap int64) error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("algo: %w: "+format, append([]any{ErrInvalidPolicy}, args...)...))
	}
	if p.Algorithm < FixedWindow || p.Algorithm > GCRA {
		bad("unknown algorithm %d", p.Algorithm)
	}
	if p.Limit < 0 || p.Limit > MaxLimit {
		bad("limit %d (want 0..%d)", p.Limit, MaxLimit)
	}
	if p.Period < 1 || p.Period > MaxPeriod {
		bad("period %dµs (want 1..%d)", p.Period, MaxPeriod)
	}
	if p.Burst < 0 {
		bad("burst %d (want ≥ 0; 0 means the limit)", p.Burst)
	}
	if problem := subWindowsProblem(p); problem != "" {
		bad("%s", problem)
	}
	if problem := subWindowsProblem(p); problem != "" {
		bad("%s", problem)
	}
	if problem := logCapProblem(logCap); problem != "" {
		bad("%s", problem)
	} else if p.Algorithm == SlidingLog && p.Limit > logCap {
		bad("sliding_log limit %d above the cap %d (memory is one entry per hit)", p.Limit, logCap)
	}
	if len(errs) == 0 && p.Algorithm.UsesBurst() && p.Limit > 0 {
		b := p.Capacity()
		// mulDiv(a, period, limit) multiplies a ≤ burst by a value below
		// limit; the product must stay exact in a double.
		if hi, lo := bits.Mul64(uint64(b), uint64(p.Limit)); hi != 0 || lo >= uint64(exact) {
			bad("burst %d × limit %d reaches 2^53 (not exact in Redis Lua); lower the burst", b, p.Limit)
		}
		// The time to refill the whole burst, burst·period/limit, must fit
		// MaxPeriod: compare burst·period ≤ MaxPeriod·limit in 128 bits.
		h1, l1 := bits.Mul64(uint64(b), uint64(p.Period))
		h2, l2 := bits.Mul64(uint64(MaxPeriod), uint64(p.Limit))
		if h1 > h2 || (h1 == h2 && l1 > l2) {
			bad("burst %d refills in more than %dµs at %d per %dµs", b, MaxPeriod, p.Limit, p.Period)
		}
	}
	return errors.Join(errs...)
}

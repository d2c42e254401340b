// Package eventually waits, in tests, for a condition that another
// goroutine or process makes true. The wait is bounded only so that a
// broken test fails instead of hanging; it asserts no duration, so the
// bound is generous for slow, loaded machines. It must not be imported by
// non-test code.
package eventually

import (
	"testing"
	"time"
)

// Bound is how long True and Holds wait before failing the test.
const Bound = 20 * time.Second

// maxInterval caps the pause between two polls.
const maxInterval = 25 * time.Millisecond

// True polls cond until it reports true, failing tb with what and cond's
// last message after Bound. Polls start 1 ms apart and back off to 25 ms.
func True(tb testing.TB, what string, cond func() (ok bool, msg string)) {
	tb.Helper()
	deadline := time.Now().Add(Bound)
	pause := time.Millisecond
	for {
		ok, msg := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			if msg == "" {
				tb.Fatalf("%s: not within %v", what, Bound)
			}
			tb.Fatalf("%s: not within %v; last: %s", what, Bound, msg)
		}
		time.Sleep(pause)
		pause = min(2*pause, maxInterval)
	}
}

// Holds is True for a condition without a message.
func Holds(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	True(tb, what, func() (bool, string) { return cond(), "" })
}

package redistest

import (
	"errors"
	"fmt"
	"testing"
)

// TestStartAttempts: a set is made anew after a failed start, no more often
// than allowed, and when every attempt fails each failure is reported.
func TestStartAttempts(t *testing.T) {
	tests := []struct {
		name      string
		attempts  int
		failFirst int // starts that fail before one succeeds
		wantCalls int
		wantErrs  int // failures named in the error; 0: success
	}{
		{name: "first succeeds", attempts: 3, failFirst: 0, wantCalls: 1},
		{name: "last succeeds", attempts: 3, failFirst: 2, wantCalls: 3},
		{name: "all fail", attempts: 2, failFirst: 5, wantCalls: 2, wantErrs: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			var failures []error
			got, err := startAttempts(tt.attempts, func() (int, error) {
				calls++
				if calls <= tt.failFirst {
					err := fmt.Errorf("start %d failed", calls)
					failures = append(failures, err)
					return 0, err
				}
				return calls, nil
			})
			if calls != tt.wantCalls {
				t.Errorf("%d starts, want %d", calls, tt.wantCalls)
			}
			if tt.wantErrs == 0 {
				if err != nil || got != calls {
					t.Fatalf("startAttempts = %d, %v; want %d, nil", got, err, calls)
				}
				return
			}
			if len(failures) != tt.wantErrs {
				t.Fatalf("%d failures, want %d", len(failures), tt.wantErrs)
			}
			for _, f := range failures {
				if !errors.Is(err, f) {
					t.Errorf("error %v does not carry %q", err, f)
				}
			}
		})
	}
}

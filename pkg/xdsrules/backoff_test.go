package xdsrules

import (
	"testing"
	"time"
)

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: time.Second, RandomFactor: 0.5, Jitter: true}
	exact := b
	exact.Jitter = false
	for _, tc := range []struct {
		name string
		b    Backoff
		n    int
		u    float64
		want time.Duration
	}{
		{"first wait", exact, 0, 0.9, 100 * time.Millisecond},
		{"doubles", exact, 2, 0.9, 400 * time.Millisecond},
		{"capped", exact, 10, 0.9, time.Second},
		{"many attempts do not overflow", exact, 1 << 20, 0.9, time.Second},
		{"jitter low end", b, 0, 0, 50 * time.Millisecond},
		{"jitter middle", b, 1, 0.5, 200 * time.Millisecond},
		{"jitter high end of the cap", b, 10, 1, 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.b.delay(tc.n, tc.u); got != tc.want {
				t.Errorf("delay(%d, %v) = %v, want %v", tc.n, tc.u, got, tc.want)
			}
		})
	}
}

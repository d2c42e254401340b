package rls

import (
	"context"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// Backend applies a request's checks atomically: every consuming check is
// admitted or none consumes anything. It returns one Decision per Check, in
// order. now is the request's time, taken once by the service as it
// arrives: every backend on the request's path (the in-process store, the
// deny cache, the failure policy and its local fallback) decides at it, so
// no two layers disagree about when the request happened. Redis keeps its
// own TIME as the authority for the state it holds. Implementations must be
// safe for concurrent use. An error means no decision could be made (for
// example Redis is unreachable); the service then answers UNAVAILABLE so
// that Envoy's failure_mode_deny decides.
type Backend interface {
	Apply(ctx context.Context, now time.Time, checks []algo.Check) ([]algo.Decision, error)
}

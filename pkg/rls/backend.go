package rls

import (
	"context"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// Backend applies a request's checks atomically: every consuming check is
// admitted or none consumes anything. It returns one Decision per Check, in
// order. Implementations must be safe for concurrent use. An error means no
// decision could be made (for example Redis is unreachable); the service then
// answers UNAVAILABLE so that Envoy's failure_mode_deny decides.
type Backend interface {
	Apply(ctx context.Context, checks []algo.Check) ([]algo.Decision, error)
}

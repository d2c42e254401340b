package algo

import (
	"context"
	"time"
)

// Applier is the contract every backend layer implements: the Redis
// backend, the in-process store, the lease layer, the deny cache, the
// failure policy and the tracing wrapper, each in front of the next. It is
// declared, and its contract written, here alone; consumers that name it
// under their own name (rls.Backend, lease.Backend …) alias it.
//
//   - All or nothing: Apply decides every check of one request together,
//     as ApplyAll does. Either every consuming check is admitted, or none
//     consumes anything (refunds still apply).
//   - One Decision per Check, in the order of checks; checks on one
//     counter (SameCounter) are merged and all receive its decision.
//   - now is the request's time, taken once as it arrives: every layer on
//     the request's path decides at it, so no two layers disagree about
//     when the request happened. Redis keeps its own TIME as the authority
//     for the state it holds unless told to evaluate at now.
//   - An error means no decision could be made (Redis unreachable, ctx
//     done); then no state changed that the caller can observe, and pkg/rls
//     answers UNAVAILABLE so that Envoy's failure_mode_deny decides.
//   - Implementations honour ctx and are safe for concurrent use.
type Applier interface {
	Apply(ctx context.Context, now time.Time, checks []Check) ([]Decision, error)
}

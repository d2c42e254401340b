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
//   - now is the request's time, taken once as it arrives, and every layer
//     gets it. What time a backend decides at is stated here alone
//     (docs/architecture.md and the backends' docs follow it):
//   - The in-process store (pkg/memstore), and every layer in front of a
//     backend (lease, deny cache, failure policy), decide at now.
//   - Redis (pkg/redisalgo) decides a request that has a fixed window, all
//     of its checks on one master (token buckets and GCRA included), at
//     that master's TIME as the replica tracks it (pkg/redisalgo/clock.go):
//     now placed on the master's tracked clock when it is near the send,
//     else the send's instant, so that no count lands in a window Redis's
//     clock says ended more than the window's margin ago. A request with
//     no fixed window is decided at the script's TIME, read as it runs.
//     Refunds across slot groups reuse the time their consumption was
//     decided at. Options.CallerTime (tests only) decides at now.
//   - Every Decision reports the time it was made at (Decision.At; 0 for a
//     backend that decides at now), and a refund that names it (Check.At)
//     is decided at that time, not at its own now: a layer that refunds
//     after the fact (the per-second split, pkg/stack) gives back in the
//     window the hits went to, on every backend and topology.
//   - An error means no decision could be made (Redis unreachable, ctx
//     done); then no state changed that the caller can observe, and pkg/rls
//     answers UNAVAILABLE so that Envoy's failure_mode_deny decides.
//   - Implementations honour ctx and are safe for concurrent use.
type Applier interface {
	Apply(ctx context.Context, now time.Time, checks []Check) ([]Decision, error)
}

// Package budget proves, through a real Envoy 1.40 (internal/envoytest),
// that budgets counted in something other than requests (tokens of an LLM
// response) hold when envoy-rls is the rate-limit service, in the shapes
// Envoy Gateway (a BackendTrafficPolicy cost: a check-only entry, then a
// stream-done charge from dynamic metadata) and the Envoy AI Gateway (a
// token quota: a one-hit entry, then a stream-done charge of
// llm_total_token) generate, and in the reservation pattern that
// examples/budget ships (reserve an estimate, settle the difference at
// stream done) which docs/budgets.md documents. A Lua filter stands in for
// what each product puts in front of the rate-limit filter, and a fake
// OpenAI-style upstream reports each response's usage.
//
// What it proves, with the built envoy-rls binary (internal/rlsproc) on a
// real Redis (internal/redistest) and in-process:
//
//   - what Envoy 1.40 sends at stream done (after its own 429, with
//     missing metadata, when the client hangs up), against a recording
//     rate-limit service;
//   - for the fixed window, the sliding window and the token bucket, a
//     budget of B tokens admits at most B + the largest response × the
//     requests in flight, is spent, denies every request until the window
//     or the refill pays it back, and admits again after;
//   - 8 clients through 4 Envoys to 2 replicas on one Redis keep each
//     pattern's bound (the reservation's is the estimates' error, not the
//     responses in flight), and Redis's counter equals every hit charged;
//   - envoyproxy/ratelimit behind the same Envoy answers the same
//     statuses, but for the differences docs/budgets.md lists.
//
// Nothing asserts a duration: windows are seconds long, each check is a
// count or a bound, and the clients' loops are bounded. The package has no
// runtime code and must not be imported; nothing here imports the
// service's packages: the binary is a black box.
package budget

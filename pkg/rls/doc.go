// Package rls is the Envoy RateLimitService v3 front end: it validates a
// RateLimitRequest, matches its descriptors against the current rules
// snapshot, hands the resulting checks to a Backend in one call, holds a
// queued request until its reserved time (queue mode), and turns the
// decisions into a RateLimitResponse with per-descriptor statuses, shadow and
// quota mode, headers and metrics. It also serves the same logic as the HTTP
// /json endpoint.
//
// rls is the only package of the request path that sees Envoy's
// RateLimitService types: the layers below it get algo.Checks and answer
// algo.Decisions (docs/architecture.md#request-path). Other packages see
// gRPC or Envoy protobufs for their own jobs: pkg/xdsrules the xDS
// RateLimitConfig protos, pkg/tracing the trace context in the incoming
// gRPC metadata, the composition root the gRPC server it registers this
// service on, and the test tools their gRPC clients.
//
// rls must not know how limits are stored: storage sits behind the Backend
// interface, which this package declares and the Redis and in-process
// stores satisfy.
package rls

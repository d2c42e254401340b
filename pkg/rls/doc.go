// Package rls is the Envoy RateLimitService v3 front end: it validates a
// RateLimitRequest, matches its descriptors against the current rules
// snapshot, hands the resulting checks to a Backend in one call, and turns the
// decisions into a RateLimitResponse with per-descriptor statuses, shadow and
// quota mode, headers and metrics. It also serves the same logic as the HTTP
// /json endpoint.
//
// rls is the only package that sees gRPC and Envoy protobuf types. It must
// not know how limits are stored: storage sits behind the Backend interface,
// which this package declares and the Redis and in-process stores satisfy.
package rls

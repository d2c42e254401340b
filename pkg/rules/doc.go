// Package rules turns envoyproxy/ratelimit-style YAML rule files into an
// immutable, precompiled Snapshot that answers "which limits apply to this
// descriptor" without allocating, and keeps that snapshot current while the
// files change on disk.
//
// The file format is a superset of envoyproxy/ratelimit's: every field that
// format accepts keeps its meaning, and the extensions (unit_multiplier,
// algorithm, burst, rate_limits, hash_tag, sub_windows, lease, cost, warmup,
// on_limit) are listed in docs/architecture.md#config-sources.
// Validation is strict and reports every problem at once, each with the
// file, line and YAML path of the offending node.
//
// Matching follows envoyproxy/ratelimit: a request descriptor's entries are
// walked level by level; at each level an exact key/value wins, then the
// first wildcard value (a value with a "*" anywhere, each "*" matching any
// run of bytes) in file order, then the key
// alone; the rule is the one at the request's last entry. Two deliberate
// differences: keys and values are compared as a pair, never through
// upstream's "key_value" string join (so key "a_b" never matches key "a"
// with value "b_..."), and a "*" in a key is an ordinary character.
//
// This package reads configuration only. It must not talk to Redis, import
// the backends or gRPC types, or log request descriptor values at info level
// or above.
package rules

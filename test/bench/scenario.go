package main

import (
	"fmt"
	"math/rand/v2"
	"strconv"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// scenario is one row of the load table: a server (the floor or envoy-rls
// with a rule file and backend) and the requests sent to it.
type scenario struct {
	name  string // --scenarios name
	title string // row label
	floor bool   // the no-work server instead of envoy-rls
	redis bool   // envoy-rls on Redis instead of the in-process store
	rules string // rule file (envoyproxy/ratelimit YAML plus algorithm)
	// workload builds the measured requests from the bounded user set.
	workload func(users []string) workload
	// prime, when set, runs first, unmeasured, with one call per user
	// (the over-limit scenario uses it to exhaust its tight limits).
	prime func(users []string) workload
	// pacedLike names the scenario whose decisions/s this one is paced
	// to; it runs only when that one runs, after it.
	pacedLike string
}

// userRule is a rule file of domain with one limit, the rate_limit
// fields given, on the user entry: the rule every one-entry scenario uses.
func userRule(domain, limit string) string {
	return "domain: " + domain + "\ndescriptors:\n  - key: user\n    rate_limit: {" + limit + "}\n"
}

// Limits high enough that nothing is ever denied, so every call does the
// full work of an admitted request.
const (
	openTokenBucket   = "unit: second, requests_per_unit: 1000000, algorithm: token_bucket"
	openSlidingWindow = "unit: second, requests_per_unit: 1000000, algorithm: sliding_window"

	rulesThree = `domain: bench-3d
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000, algorithm: token_bucket}
    descriptors:
      - key: path
        rate_limit: {unit: second, requests_per_unit: 1000000, algorithm: token_bucket}
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 1000000, algorithm: token_bucket}
`
	// "over" admits one call per user per hour, so after the prime pass
	// every call on it is denied; "user" admits everything. Sending 90% of
	// calls to "over" makes ~90% of decisions denials, without depending on
	// the throughput the machine reaches.
	rulesOver = `domain: bench-over
descriptors:
  - key: over
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: token_bucket}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000, algorithm: token_bucket}
`
	// One hit leaves a day-long bucket short of a token for 2.4 h: every
	// key stays live through the memory check.
	memoryLimit = "unit: day, requests_per_unit: 10, algorithm: token_bucket"
	// One hit refills in 10 s: random keys expire soon after their only
	// use, so a bounded store must plateau.
	soakLimit = "unit: minute, requests_per_unit: 6, algorithm: token_bucket"
)

// loadScenarios lists the load scenarios in the order they run; the floor
// comes first so every later row can be divided by it.
func loadScenarios() []scenario {
	return []scenario{
		{name: "floor", title: "floor (no-work gRPC server)", floor: true,
			workload: perUser("bench-floor")},
		{name: "inproc", title: "in-process store, token_bucket", rules: userRule("bench-tb", openTokenBucket),
			workload: perUser("bench-tb")},
		{name: "redis-token-bucket", title: "Redis, token_bucket", redis: true, rules: userRule("bench-tb", openTokenBucket),
			workload: perUser("bench-tb")},
		// The floor at Redis token_bucket's throughput: on a saturated
		// machine a gRPC server's CPU per call grows as its throughput
		// falls, so this separates what envoy-rls adds from what the lower
		// throughput costs any server.
		{name: floorPacedName, title: "floor paced to Redis token_bucket's decisions/s", floor: true, pacedLike: "redis-token-bucket",
			workload: perUser("bench-floor")},
		{name: "redis-sliding-window", title: "Redis, sliding_window", redis: true, rules: userRule("bench-sw", openSlidingWindow),
			workload: perUser("bench-sw")},
		{name: "redis-3-descriptors", title: "Redis, 3 descriptors/request", redis: true, rules: rulesThree,
			workload: threeDescriptors},
		{name: "redis-90-over", title: "Redis, ~90% over limit", redis: true, rules: rulesOver,
			workload: overNinety, prime: primeOver},
	}
}

// floorPacedName is the floor paced to Redis token_bucket's throughput.
const floorPacedName = "floor-paced"

// Names of the two phases that are not load rows.
const (
	memoryName = "memory"
	soakName   = "soak"
)

func allScenarioNames() []string {
	var names []string
	for _, s := range loadScenarios() {
		names = append(names, s.name)
	}
	return append(names, memoryName, soakName)
}

// makeUsers returns n distinct user ids, built once so the workers only
// pick among them.
func makeUsers(n int) []string {
	u := make([]string, n)
	for i := range u {
		u[i] = fmt.Sprintf("user-%06d", i)
	}
	return u
}

func entry(key string) *rlv3.RateLimitDescriptor_Entry {
	return &rlv3.RateLimitDescriptor_Entry{Key: key}
}

func descriptor(entries ...*rlv3.RateLimitDescriptor_Entry) *rlv3.RateLimitDescriptor {
	return &rlv3.RateLimitDescriptor{Entries: entries}
}

func request(domain string, descs ...*rlv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: descs}
}

// oneEntry is the workload of domain that sends one descriptor with one
// entry, key=<value>: the shape of a per-user or per-IP limit. newValue
// makes each worker's value source, so that a source may keep a buffer.
func oneEntry(domain, key string, newValue func() func(rnd *rand.Rand, seq int64) string) workload {
	return workload{newWorker: func() func(*rand.Rand, int64) *rlsv3.RateLimitRequest {
		e := entry(key)
		req := request(domain, descriptor(e))
		value := newValue()
		return func(rnd *rand.Rand, seq int64) *rlsv3.RateLimitRequest {
			e.Value = value(rnd, seq)
			return req
		}
	}}
}

// perUser is the workload of domain that sends user=<random user>.
func perUser(domain string) func(users []string) workload {
	return func(users []string) workload {
		return oneEntry(domain, "user", func() func(*rand.Rand, int64) string {
			return func(rnd *rand.Rand, _ int64) string { return users[rnd.IntN(len(users))] }
		})
	}
}

// threeDescriptors sends [user], [tenant], [user, path]: three limits, all
// evaluated in one backend call.
func threeDescriptors(users []string) workload {
	tenants := make([]string, 100)
	for i := range tenants {
		tenants[i] = "tenant-" + strconv.Itoa(i)
	}
	paths := make([]string, 10)
	for i := range paths {
		paths[i] = "/api/v1/resource" + strconv.Itoa(i)
	}
	return workload{newWorker: func() func(*rand.Rand, int64) *rlsv3.RateLimitRequest {
		user, tenant, user2, path := entry("user"), entry("tenant"), entry("user"), entry("path")
		req := request("bench-3d", descriptor(user), descriptor(tenant), descriptor(user2, path))
		return func(rnd *rand.Rand, _ int64) *rlsv3.RateLimitRequest {
			user.Value = users[rnd.IntN(len(users))]
			user2.Value = user.Value
			tenant.Value = tenants[rnd.IntN(len(tenants))]
			path.Value = paths[rnd.IntN(len(paths))]
			return req
		}
	}}
}

// overNinety sends 9 calls in 10 to the exhausted "over" limit and the rest
// to the open "user" limit.
func overNinety(users []string) workload {
	return workload{newWorker: func() func(*rand.Rand, int64) *rlsv3.RateLimitRequest {
		over, user := entry("over"), entry("user")
		overReq := request("bench-over", descriptor(over))
		userReq := request("bench-over", descriptor(user))
		return func(rnd *rand.Rand, _ int64) *rlsv3.RateLimitRequest {
			v := users[rnd.IntN(len(users))]
			if rnd.IntN(10) < 9 {
				over.Value = v
				return overReq
			}
			user.Value = v
			return userReq
		}
	}}
}

// primeOver spends every user's single "over" token, one call per user.
func primeOver(users []string) workload {
	return oneEntry("bench-over", "over", func() func(*rand.Rand, int64) string {
		return func(_ *rand.Rand, seq int64) string { return users[seq%int64(len(users))] }
	})
}

// distinctKeys sends perReq descriptors per call, each with a user id never
// sent before: call seq covers ids seq*perReq .. seq*perReq+perReq-1.
func distinctKeys(perReq int) workload {
	return workload{newWorker: func() func(*rand.Rand, int64) *rlsv3.RateLimitRequest {
		entries := make([]*rlv3.RateLimitDescriptor_Entry, perReq)
		req := request("bench-mem")
		for i := range entries {
			entries[i] = entry("user")
			req.Descriptors = append(req.Descriptors, descriptor(entries[i]))
		}
		buf := make([]byte, 0, 32)
		return func(_ *rand.Rand, seq int64) *rlsv3.RateLimitRequest {
			for i, e := range entries {
				buf = strconv.AppendInt(append(buf[:0], "user-"...), seq*int64(perReq)+int64(i), 10)
				e.Value = string(buf)
			}
			return req
		}
	}}
}

// randomKeys sends one descriptor with a fresh random user id per call: an
// unbounded key space, as from a scan or an attack.
func randomKeys() workload {
	return oneEntry("bench-soak", "user", func() func(*rand.Rand, int64) string {
		buf := make([]byte, 0, 32)
		return func(rnd *rand.Rand, _ int64) string {
			buf = strconv.AppendUint(append(buf[:0], "user-"...), rnd.Uint64(), 36)
			return string(buf)
		}
	})
}

package main

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

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
	// rate, when positive, paces the workers to that many calls/s
	// (loadConfig.rate) instead of a closed loop.
	rate float64
	// args go to envoy-rls after the driver's own (and --rls-args).
	args []string
	// bound, when set, is the most the limit may admit over a measured
	// interval; the lease table sets the admitted count against it.
	bound func(elapsed time.Duration) float64
	// group, when set, puts the row in the lease table (issue 12) too.
	group string
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

// The lease scenarios (issue 12). rulesHot holds one limit that never
// denies; rulesHalf one that admits half of hotHalfRate, the pace its
// scenarios send at, so about half the calls are denied whatever the
// machine's throughput (as long as it reaches that pace). rulesLeased is
// the random-key limit with leasing allowed: random keys stay cold, so
// leasing must change nothing there. Leasing off is --lease-ttl=0 on the
// same rules.
const (
	rulesHot = `domain: bench-hot
descriptors:
  - key: route
    rate_limit: {unit: second, requests_per_unit: 10000000, algorithm: token_bucket, lease: auto}
`
	hotHalfLimit = 3000
	hotHalfRate  = 2 * hotHalfLimit
	rulesHalf    = `domain: bench-hot
descriptors:
  - key: route
    rate_limit: {unit: second, requests_per_unit: 3000, algorithm: token_bucket, lease: auto}
`
	rulesLeased = `domain: bench-tb
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000, algorithm: token_bucket, lease: auto}
`
	// moderateRate is the fixed "moderate load" for random keys.
	moderateRate = 4000
)

// leaseOff turns the lease layer off.
var leaseOff = []string{"--lease-ttl=0s"}

// halfBound is what rulesHalf's token bucket can admit in elapsed: a full
// bucket (burst = the limit) and its refill.
func halfBound(elapsed time.Duration) float64 {
	return hotHalfLimit + hotHalfLimit*elapsed.Seconds()
}

// leaseScenarios are issue 12's rows, leasing on and off: a hot key that
// is never denied (against the in-process store on the same key) and one
// denied about half the time; random keys at moderateRate, with the batch
// linger at several values; random keys in the closed loop.
func leaseScenarios() []scenario {
	hot := func(name, title string, redis bool, rules string, rate float64, args []string, bound func(time.Duration) float64) scenario {
		return scenario{name: name, title: title, redis: redis, rules: rules, workload: hotKey, rate: rate, args: args, bound: bound, group: "hot"}
	}
	random := func(name, title string, rate float64, args ...string) scenario {
		return scenario{name: name, title: title, redis: true, rules: rulesLeased, workload: perUser("bench-tb"), rate: rate, args: args, group: "random"}
	}
	linger := func(us int) scenario {
		return random(fmt.Sprintf("random-%d-linger-%d", moderateRate, us), fmt.Sprintf("random keys at %d/s, --redis-batch-linger=%dµs", moderateRate, us),
			moderateRate, fmt.Sprintf("--redis-batch-linger=%dus", us))
	}
	return []scenario{
		hot("hot-inproc", "hot key, in-process store", false, rulesHot, 0, nil, nil),
		hot("hot-lease", "hot key, Redis, leases on", true, rulesHot, 0, nil, nil),
		hot("hot-nolease", "hot key, Redis, leases off", true, rulesHot, 0, leaseOff, nil),
		hot("hot-half-lease", fmt.Sprintf("hot key ~50%% denied (%d/s on %d/s), leases on", hotHalfRate, hotHalfLimit), true, rulesHalf, hotHalfRate, nil, halfBound),
		hot("hot-half-nolease", fmt.Sprintf("hot key ~50%% denied (%d/s on %d/s), leases off", hotHalfRate, hotHalfLimit), true, rulesHalf, hotHalfRate, leaseOff, halfBound),
		random(fmt.Sprintf("random-%d-lease", moderateRate), fmt.Sprintf("random keys at %d/s, leases on", moderateRate), moderateRate),
		random(fmt.Sprintf("random-%d-nolease", moderateRate), fmt.Sprintf("random keys at %d/s, leases off", moderateRate), moderateRate, leaseOff...),
		linger(50), linger(100), linger(200),
		random("random-closed-lease", "random keys, closed loop, leases on", 0),
		random("random-closed-nolease", "random keys, closed loop, leases off", 0, leaseOff...),
	}
}

// hotKey sends every call on one descriptor, route=/hot: a per-route or
// global limit that every request carries.
func hotKey(_ []string) workload {
	return workload{newWorker: func() func(*rand.Rand, int64) *rlsv3.RateLimitRequest {
		req := request("bench-hot", descriptor(&rlv3.RateLimitDescriptor_Entry{Key: "route", Value: "/hot"}))
		return func(*rand.Rand, int64) *rlsv3.RateLimitRequest { return req }
	}}
}

// loadScenarios lists the load scenarios in the order they run; the floor
// comes first so every later row can be divided by it.
func loadScenarios() []scenario {
	return append([]scenario{
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
	}, leaseScenarios()...)
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
	return append(names, memoryName, soakName, queueName)
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

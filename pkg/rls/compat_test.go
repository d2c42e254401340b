package rls

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/internal/rulestest"
	"github.com/envoy-rls/envoy-rls/internal/upstream"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/redisalgo"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// TestMain lets the Redis runs of the compatibility test share one
// redis-server, started on first use and stopped after the last test.
func TestMain(m *testing.M) { redistest.Main(m) }

// compatLimit is an expected current_limit. name is envoy-rls's
// current_limit.name (envoyproxy/ratelimit's is always empty).
type compatLimit struct {
	rpu  uint32
	unit pb.RateLimitResponse_RateLimit_Unit
	name string
}

// compatStatus is an expected descriptor status; a nil limit means no
// current_limit.
type compatStatus struct {
	code      pb.RateLimitResponse_Code
	limit     *compatLimit
	remaining uint32
}

// compatStep is one request: after advancing the clock by advance, the
// descriptors with the request-level hits_addend hits (0 means 1).
type compatStep struct {
	advance time.Duration
	hits    uint32
	descs   [][]string
	// want is what envoyproxy/ratelimit answers, one status per descriptor.
	want []compatStatus
	// ours, when set, is what envoy-rls answers instead (see
	// TestCompatEnvoyproxyExamples).
	ours []compatStatus
}

type compatScenario struct {
	name   string
	domain string
	// yaml is the README's config; runCompat rewrites its domain line so
	// that each run has its own domain (and so its own Redis keys).
	yaml string
	// globalShadow serves with Config.ShadowMode, as SHADOW_MODE=true does.
	globalShadow bool
	steps        []compatStep
}

func lim(rpu uint32, unit pb.RateLimitResponse_RateLimit_Unit) *compatLimit {
	return &compatLimit{rpu: rpu, unit: unit}
}

func named(name string, l *compatLimit) *compatLimit { l.name = name; return l }

func okStatus(l *compatLimit, remaining uint32) compatStatus {
	return compatStatus{code: pb.RateLimitResponse_OK, limit: l, remaining: remaining}
}

func overStatus(l *compatLimit) compatStatus {
	return compatStatus{code: pb.RateLimitResponse_OVER_LIMIT, limit: l}
}

// noLimit is the status of a descriptor no rule applies to.
var noLimit = compatStatus{code: pb.RateLimitResponse_OK}

// unlimitedStatus is the status of a descriptor whose rule is unlimited.
var unlimitedStatus = compatStatus{code: pb.RateLimitResponse_OK, remaining: math.MaxUint32}

// countdown is n single requests of descs at the same instant, each
// answered OK with one less remaining, starting at first.
func countdown(n int, first uint32, l *compatLimit, descs ...[]string) []compatStep {
	steps := make([]compatStep, n)
	for i := range steps {
		steps[i] = compatStep{descs: descs, want: []compatStatus{okStatus(l, first-uint32(i))}}
	}
	return steps
}

func one(kvs ...string) [][]string { return [][]string{kvs} }

func compatScenarios() []compatScenario {
	const (
		second = pb.RateLimitResponse_RateLimit_SECOND
		minute = pb.RateLimitResponse_RateLimit_MINUTE
		day    = pb.RateLimitResponse_RateLimit_DAY
	)
	mongo := `
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
`
	users, dflt := []string{"database=users"}, []string{"database=default"}
	per500 := lim(500, second)

	marketing := []string{"message_type=marketing", "to_number=2061111111"}
	number := []string{"to_number=2061111111"}
	perDay5, perDay100 := lim(5, day), lim(100, day)
	nested := make([]compatStep, 5)
	for i := range nested {
		nested[i] = compatStep{descs: [][]string{marketing, number}, want: []compatStatus{
			okStatus(perDay5, uint32(4-i)), okStatus(perDay100, uint32(99-i)),
		}}
	}

	ip1, ip2, banned := []string{"remote_address=50.0.0.1"}, []string{"remote_address=50.0.0.2"}, []string{"remote_address=50.0.0.5"}
	per10, blocked := lim(10, second), lim(0, second)

	userA := []string{"service=auth-service", "user=user-a"}
	userB := []string{"service=auth-service", "user=user-b"}
	per20 := lim(20, second)

	viaKey1 := []string{"key_1=value_1", "user=bkthomps"}
	viaKey2 := []string{"key_2=value_2", "user=bkthomps"}
	specific, replacing := named("specific_limit", lim(5, second)), lim(10, second)

	return []compatScenario{
		{
			name: "example1_basic", domain: "mongo_cps", yaml: mongo,
			steps: []compatStep{
				{descs: one(users...), want: []compatStatus{okStatus(per500, 499)}},
				{hits: 498, descs: one(users...), want: []compatStatus{okStatus(per500, 1)}},
				{descs: one(dflt...), want: []compatStatus{okStatus(per500, 499)}},
				{descs: one(users...), want: []compatStatus{okStatus(per500, 0)}},
				{descs: one(users...), want: []compatStatus{overStatus(per500)}},
				// The next one-second window starts afresh.
				{advance: time.Second, descs: one(users...), want: []compatStatus{okStatus(per500, 499)}},
				{hits: 400, descs: one(users...), want: []compatStatus{okStatus(per500, 99)}},
				// 200 hits do not fit the 99 left. envoyproxy/ratelimit
				// counts them anyway (601 of 500) and reports 0 left;
				// envoy-rls counts none and reports the 99 still left.
				{
					hits: 200, descs: one(users...),
					want: []compatStatus{overStatus(per500)},
					ours: []compatStatus{{code: pb.RateLimitResponse_OVER_LIMIT, limit: per500, remaining: 99}},
				},
				// So 99 more are over the limit in envoyproxy/ratelimit,
				// and fit exactly in envoy-rls.
				{
					hits: 99, descs: one(users...),
					want: []compatStatus{overStatus(per500)},
					ours: []compatStatus{okStatus(per500, 0)},
				},
				{descs: one(users...), want: []compatStatus{overStatus(per500)}},
			},
		},
		{
			name: "example2_nested", domain: "messaging",
			yaml: upstream.Example2,
			steps: slices.Concat(nested, []compatStep{
				// The marketing limit denies the sixth request.
				// envoyproxy/ratelimit still counts it against the
				// number's 100 a day; envoy-rls does not.
				{
					descs: [][]string{marketing, number},
					want:  []compatStatus{overStatus(perDay5), okStatus(perDay100, 94)},
					ours:  []compatStatus{overStatus(perDay5), okStatus(perDay100, 95)},
				},
				// The same number alone: one count apart, as above.
				{
					descs: [][]string{number},
					want:  []compatStatus{okStatus(perDay100, 93)},
					ours:  []compatStatus{okStatus(perDay100, 94)},
				},
				{descs: one("message_type=marketing", "to_number=2062222222"), want: []compatStatus{okStatus(perDay5, 4)}},
				{descs: one("to_number=2062222222"), want: []compatStatus{okStatus(perDay100, 99)}},
				// No rule for this message type.
				{descs: one("message_type=transactional", "to_number=2061111111"), want: []compatStatus{noLimit}},
				{advance: 24 * time.Hour, descs: [][]string{marketing, number}, want: []compatStatus{okStatus(perDay5, 4), okStatus(perDay100, 99)}},
			}),
		},
		{
			name: "example3_matching_order_and_block", domain: "edge_proxy_per_ip",
			yaml: `
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10

  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
`,
			steps: slices.Concat(countdown(10, 9, per10, ip1), []compatStep{
				{descs: one(ip1...), want: []compatStatus{overStatus(per10)}},
				// The key/value rule wins over the key-only one: 0 per
				// second blocks from the first request.
				{descs: one(banned...), want: []compatStatus{overStatus(blocked)}},
				{descs: one(ip2...), want: []compatStatus{okStatus(per10, 9)}},
				{advance: time.Second, descs: one(ip1...), want: []compatStatus{okStatus(per10, 9)}},
				{descs: one(banned...), want: []compatStatus{overStatus(blocked)}},
			}),
		},
		{
			name: "example4_depth_too_deep", domain: "example4",
			yaml: `
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
`,
			steps: []compatStep{
				// The request has more entries than the tree has levels.
				{descs: one("key=value", "subkey=subvalue"), want: []compatStatus{noLimit}},
				{descs: one("key=value"), want: []compatStatus{okStatus(lim(300, second), 299)}},
			},
		},
		{
			name: "example4_depth_nested", domain: "example4",
			yaml: `
domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
`,
			steps: []compatStep{
				{descs: one("key=value", "subkey=subvalue"), want: []compatStatus{okStatus(lim(300, second), 299)}},
				{descs: one("key=value", "subkey=subvalue"), want: []compatStatus{okStatus(lim(300, second), 298)}},
				{descs: one("key=value", "subkey=other"), want: []compatStatus{okStatus(lim(300, second), 299)}},
				// The first level alone has no limit of its own.
				{descs: one("key=value"), want: []compatStatus{noLimit}},
			},
		},
		{
			name: "example5_unlimited", domain: "internal",
			yaml: `
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true

  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
`,
			steps: []compatStep{
				{descs: one("ldap=x"), want: []compatStatus{unlimitedStatus}},
				{descs: one("azure=x"), want: []compatStatus{okStatus(lim(100, minute), 99)}},
				{descs: [][]string{{"ldap=x"}, {"azure=x"}}, want: []compatStatus{unlimitedStatus, okStatus(lim(100, minute), 98)}},
				{hits: 1000, descs: one("ldap=x"), want: []compatStatus{unlimitedStatus}},
			},
		},
		{
			name: "example6_shadow_mode", domain: "example6",
			yaml: `
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
`,
			steps: slices.Concat(countdown(10, 9, per10, userA), []compatStep{
				// Over the limit, but in shadow mode: OK with nothing left.
				{descs: one(userA...), want: []compatStatus{okStatus(per10, 0)}},
				{descs: one(userA...), want: []compatStatus{okStatus(per10, 0)}},
			}, countdown(20, 19, per20, userB), []compatStep{
				{descs: one(userB...), want: []compatStatus{overStatus(per20)}},
				{descs: [][]string{userA, userB}, want: []compatStatus{okStatus(per10, 0), overStatus(per20)}},
				{advance: time.Second, descs: one(userA...), want: []compatStatus{okStatus(per10, 9)}},
			}),
		},
		{
			name: "example7_replaces", domain: "example7",
			yaml: upstream.Example7,
			steps: slices.Concat([]compatStep{
				// Both descriptors: the 10 per second replaces the named
				// 5 per second, which reports no limit and is not counted.
				{descs: [][]string{viaKey1, viaKey2}, want: []compatStatus{noLimit, okStatus(replacing, 9)}},
				{descs: [][]string{viaKey1, viaKey2}, want: []compatStatus{noLimit, okStatus(replacing, 8)}},
				{descs: [][]string{viaKey1, viaKey2}, want: []compatStatus{noLimit, okStatus(replacing, 7)}},
			}, countdown(5, 4, specific, viaKey1), []compatStep{
				{descs: one(viaKey1...), want: []compatStatus{overStatus(specific)}},
				// The exhausted 5 per second is replaced, so it does not deny.
				{descs: [][]string{viaKey1, viaKey2}, want: []compatStatus{noLimit, okStatus(replacing, 6)}},
				{descs: one(viaKey2...), want: []compatStatus{okStatus(replacing, 5)}},
			}),
		},
		{
			name: "example8_detailed_metric", domain: "example8",
			yaml: `
domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
`,
			steps: []compatStep{
				{descs: one("key1=unspecified_value"), want: []compatStatus{okStatus(lim(10, minute), 9)}},
				{descs: one("key1=unspecified_value"), want: []compatStatus{okStatus(lim(10, minute), 8)}},
				{descs: one("key1=unspecified_value2"), want: []compatStatus{okStatus(lim(10, minute), 9)}},
				{descs: one("key1=value1"), want: []compatStatus{okStatus(lim(20, minute), 19)}},
			},
		},
		{
			name: "example9_wildcard", domain: "example9",
			yaml: `
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
`,
			steps: []compatStep{
				// Each value the wildcard matches has its own counter.
				{descs: one("key1=value_1"), want: []compatStatus{okStatus(lim(20, minute), 19)}},
				{descs: one("key1=value_1"), want: []compatStatus{okStatus(lim(20, minute), 18)}},
				{descs: one("key1=value_2"), want: []compatStatus{okStatus(lim(20, minute), 19)}},
				{descs: one("key1=other"), want: []compatStatus{noLimit}},
				{advance: time.Minute, descs: one("key1=value_1"), want: []compatStatus{okStatus(lim(20, minute), 19)}},
			},
		},
		{
			// envoyproxy/ratelimit's test/config/wildcard.yaml and the
			// "*"-anywhere cases of its share_threshold.yaml.
			name: "wildcard_anywhere_share_threshold", domain: "test-domain",
			yaml: `
domain: test-domain
descriptors:
  - key: midWild
    value: bar*b
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: multiWild
    value: foo*bar*baz
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: file
    value: test1
    rate_limit:
      unit: minute
      requests_per_unit: 50
  - key: file
    value: test*
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 100
  - key: midpath
    value: /api*v1
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 100
  - key: multiroute
    value: svc*ep*rpc
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 50
`,
			steps: []compatStep{
				// Without share_threshold each matching value has its own counter.
				{descs: one("midWild=barab"), want: []compatStatus{okStatus(lim(20, minute), 19)}},
				{descs: one("midWild=barb"), want: []compatStatus{okStatus(lim(20, minute), 19)}},
				{descs: one("midWild=barab"), want: []compatStatus{okStatus(lim(20, minute), 18)}},
				{descs: one("midWild=xbarb"), want: []compatStatus{noLimit}},
				{descs: one("multiWild=foo123bar456baz"), want: []compatStatus{okStatus(lim(20, minute), 19)}},
				{descs: one("multiWild=foo123baz"), want: []compatStatus{noLimit}},
				// The exact value wins over the shared wildcard.
				{descs: one("file=test1"), want: []compatStatus{okStatus(lim(50, minute), 49)}},
				{descs: one("file=test2"), want: []compatStatus{okStatus(lim(100, minute), 99)}},
				{descs: one("file=test23"), want: []compatStatus{okStatus(lim(100, minute), 98)}},
				// With share_threshold every matching value counts against one counter.
				{descs: one("midpath=/api/v1"), want: []compatStatus{okStatus(lim(100, minute), 99)}},
				{descs: one("midpath=/api-beta-v1"), want: []compatStatus{okStatus(lim(100, minute), 98)}},
				{hits: 98, descs: one("midpath=/apiXYZv1"), want: []compatStatus{okStatus(lim(100, minute), 0)}},
				{descs: one("midpath=/api/v1"), want: []compatStatus{overStatus(lim(100, minute))}},
				{descs: one("midpath=/api/v2"), want: []compatStatus{noLimit}},
				{hits: 50, descs: one("multiroute=svcAepBrpc"), want: []compatStatus{okStatus(lim(50, minute), 0)}},
				{descs: one("multiroute=svceprpc"), want: []compatStatus{overStatus(lim(50, minute))}},
				{descs: one("multiroute=svcABCrpc"), want: []compatStatus{noLimit}},
				{advance: time.Minute, descs: one("multiroute=svcXXXepYYYrpc"), want: []compatStatus{okStatus(lim(50, minute), 49)}},
			},
		},
		{
			name: "global_shadow_mode", domain: "mongo_cps", yaml: mongo, globalShadow: true,
			steps: []compatStep{
				{hits: 500, descs: one(users...), want: []compatStatus{okStatus(per500, 0)}},
				// users is over its limit: overall_code is OK, its own
				// status stays OVER_LIMIT, and the request, which passes,
				// still counts against default.
				{
					descs: [][]string{users, dflt},
					want:  []compatStatus{overStatus(per500), okStatus(per500, 499)},
				},
			},
		},
	}
}

// compatBackends are the stores every scenario runs on; each returns a
// backend that decides at the service's clock and the domain prefix that keeps the run's keys
// apart from every other test's.
var compatBackends = []struct {
	name string
	new  func(t *testing.T) (Backend, string)
}{
	{"memstore", func(t *testing.T) (Backend, string) {
		return newStore(t), ""
	}},
	{"redis", func(t *testing.T) (Backend, string) {
		b, err := redisalgo.New(redistest.SharedStandalone(t).Client(t), redisalgo.Options{CallerTime: true})
		if err != nil {
			t.Fatalf("redisalgo.New: %v", err)
		}
		// Keys derive from the domain: a test-unique domain isolates
		// them on the shared server.
		return b, redistest.KeyPrefix(t)
	}},
}

// TestCompatEnvoyproxyExamples replays the request sequences of the
// examples in envoyproxy/ratelimit's README (examples 1-9 and global shadow
// mode), and its wildcard and share_threshold config test cases, with the rules served as fixed_window, as
// --default-algorithm=fixed_window does, on the in-process store and on
// Redis, and checks that every response has the codes, current_limit and
// limit_remaining that envoyproxy/ratelimit answers.
//
// envoy-rls differs on purpose where envoyproxy/ratelimit counts a denied
// request: it increments its counters before comparing them with the
// limit, so a denied request consumes quota, of the limit that denied it
// and of every other limit of the request, and reports 0 left. envoy-rls
// consumes nothing for a denied request and reports what is really left.
// The sequences include requests where that shows: such a step has
// envoyproxy/ratelimit's answer in want and envoy-rls's in ours, with the
// reason beside it. So does the global shadow mode step, where
// envoyproxy/ratelimit leaves a denying descriptor's status OVER_LIMIT and
// envoy-rls reports OK.
//
// One difference holds in every step and is checked without being listed:
// envoy-rls fills current_limit.name with the rate_limit's name (Envoy's
// RateLimit.name field); envoyproxy/ratelimit leaves it empty.
//
// With Config.CountDeniedHits (--count-denied-hits), envoy-rls counts a
// denied request as envoyproxy/ratelimit does, and every step must then
// answer what envoyproxy/ratelimit answers: want, never ours.
func TestCompatEnvoyproxyExamples(t *testing.T) {
	for _, be := range compatBackends {
		for _, countDenied := range []bool{false, true} {
			name := be.name
			if countDenied {
				name += "/count_denied_hits"
			}
			t.Run(name, func(t *testing.T) {
				for _, sc := range compatScenarios() {
					t.Run(sc.name, func(t *testing.T) {
						runCompat(t, sc, be.new, countDenied)
					})
				}
			})
		}
	}
}

func runCompat(t *testing.T, sc compatScenario, newBackend func(*testing.T) (Backend, string), countDenied bool) {
	clk := &clock{t: epoch}
	backend, prefix := newBackend(t)
	domain := prefix + sc.domain
	yaml := withDomain(t, sc.yaml, sc.domain, domain)
	// --count-denied-hits makes every limit a charge, in the rules and
	// for overrides alike.
	snap := rulestest.Snapshot(t, sc.name+".yaml", yaml, rules.Options{DefaultAlgorithm: algo.FixedWindow, DefaultCharge: countDenied})
	s := newService(t, snap, Config{
		Backend:          backend,
		Now:              clk.Now,
		DefaultAlgorithm: algo.FixedWindow,
		ShadowMode:       sc.globalShadow,
		DefaultCharge:    countDenied,
	})
	for i, st := range sc.steps {
		clk.Advance(st.advance)
		descs := make([]*ratelimitv3.RateLimitDescriptor, len(st.descs))
		for j, kvs := range st.descs {
			descs[j] = desc(kvs...)
		}
		req := request(domain, descs...)
		req.HitsAddend = st.hits
		resp := call(t, s, req)

		want := st.want
		if st.ours != nil && !countDenied {
			if slices.Equal(st.ours, st.want) {
				t.Fatalf("step %d: ours repeats want; drop it", i)
			}
			want = st.ours
		}
		if len(want) != len(descs) {
			t.Fatalf("step %d: %d expected statuses for %d descriptors", i, len(want), len(descs))
		}
		// overall_code is OVER_LIMIT when a status is, in both services,
		// except under global shadow mode.
		overall := pb.RateLimitResponse_OK
		for j, w := range want {
			got := resp.GetStatuses()[j]
			if msg := compatDiff(got, w); msg != "" {
				t.Fatalf("step %d (+%v, hits %d, %v), status %d: %s", i, st.advance, st.hits, st.descs, j, msg)
			}
			if w.code == pb.RateLimitResponse_OVER_LIMIT && !sc.globalShadow {
				overall = pb.RateLimitResponse_OVER_LIMIT
			}
		}
		if resp.GetOverallCode() != overall {
			t.Fatalf("step %d (%v): overall_code %s, want %s", i, st.descs, resp.GetOverallCode(), overall)
		}
	}
}

// compatDiff describes how got differs from w, or returns "".
func compatDiff(got *pb.RateLimitResponse_DescriptorStatus, w compatStatus) string {
	var b strings.Builder
	if got.GetCode() != w.code {
		fmt.Fprintf(&b, " code %s, want %s;", got.GetCode(), w.code)
	}
	if got.GetLimitRemaining() != w.remaining {
		fmt.Fprintf(&b, " limit_remaining %d, want %d;", got.GetLimitRemaining(), w.remaining)
	}
	l := got.GetCurrentLimit()
	switch {
	case w.limit == nil && l != nil:
		fmt.Fprintf(&b, " current_limit %v, want none;", l)
	case w.limit != nil && l == nil:
		fmt.Fprintf(&b, " no current_limit, want %d/%s;", w.limit.rpu, w.limit.unit)
	case w.limit != nil:
		if l.GetRequestsPerUnit() != w.limit.rpu || l.GetUnit() != w.limit.unit || l.GetUnitMultiplier() != nil || l.GetName() != w.limit.name {
			fmt.Fprintf(&b, " current_limit %v, want %d/%s name %q;", l, w.limit.rpu, w.limit.unit, w.limit.name)
		}
	}
	return strings.TrimSpace(b.String())
}

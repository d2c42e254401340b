package arch

// grpcStack is what "knows about gRPC" means in the package docs: gRPC
// itself and the Envoy protobuf types generated for it.
var grpcStack = []string{"google.golang.org/grpc", "github.com/envoyproxy/go-control-plane"}

// envoyTypes are Envoy's generated protobuf types. pkg/rls's doc: "rls is
// the only package of the request path that sees Envoy's RateLimitService
// types".
const envoyTypes = "github.com/envoyproxy/go-control-plane"

// redis is the Redis client; "must not talk to Redis" forbids it.
const redis = "github.com/redis/go-redis"

// testKit is the prefix of test support: every package under it exists for
// tests only, and code outside test/ and the kit must not import it but
// from _test.go files (each kit package's doc says so). The rule matches
// the prefix, not a list, so a new kit package cannot be left out of it.
const testKit = "internal/testkit/"

// moduleRules is the allow-list: for every package of the module (path
// relative to the module), the module packages its non-test code may import
// and the other rules its package doc states. Each entry quotes the rule
// it enforces; change the doc and the entry together.
var moduleRules = map[string]rule{
	// The composition root: it wires everything, but never test support.
	"internal/app": {allow: []string{"*"}}, // 23a's composition root

	// The binary's command line (issue 41), its arrows downward only:
	// cmd/envoy-rls → internal/cli → internal/clients → internal/serveconfig
	// → internal/dropin → internal/flagenv.
	// "It must not import any other envoy-rls package than internal/cli and
	// internal/flagenv."
	"cmd/envoy-rls": {allow: []string{"internal/cli", "internal/flagenv"}},
	// "It must not import the pkg/ packages: it reaches them only through
	// those" (internal/app, internal/serveconfig, internal/clients).
	"internal/cli": {allow: []string{"internal/app", "internal/clients", "internal/dropin", "internal/flagenv", "internal/serveconfig"}},
	// "It serves nothing and must not import internal/app or internal/cli."
	"internal/clients": {allow: []string{
		"internal/flagenv", "internal/serveconfig",
		"pkg/console", "pkg/explain", "pkg/inspect", "pkg/override", "pkg/redisalgo", "pkg/redisclient", "pkg/rls", "pkg/rules", "pkg/tlsfiles",
	}},
	// "it must not import internal/cli or internal/clients": the settings,
	// and the app's Config they turn into, with the packages whose options
	// the flags parse into.
	"internal/serveconfig": {allow: []string{
		"internal/app", "internal/dropin", "internal/flagenv",
		"pkg/algo", "pkg/failover", "pkg/lease", "pkg/override", "pkg/redisalgo", "pkg/redisclient",
		"pkg/refstats", "pkg/rlqs", "pkg/rls", "pkg/rules", "pkg/stack", "pkg/tlsfiles", "pkg/tracing", "pkg/xdsrules",
	}},
	// "it must not import internal/app, internal/serveconfig or
	// internal/cli": flags by name, and the rule options it sets.
	"internal/dropin": {allow: []string{"internal/flagenv", "pkg/algo", "pkg/rules"}, forbid: append([]string{redis}, grpcStack...)},
	// "it must not import any other envoy-rls package."
	"internal/flagenv": {},

	// "This package must import nothing outside the standard library."
	"pkg/algo": {stdlibOnly: true},
	// "It must not import any other package of envoy-rls."
	"pkg/shardmap": {},
	// The client-TLS-from-files builder: the standard library only.
	"pkg/tlsfiles": {stdlibOnly: true},
	"pkg/evict":    {stdlibOnly: true},
	// "It imports nothing outside the standard library."
	"pkg/jsonhttp": {stdlibOnly: true},

	// "must not import pkg/rules, pkg/memstore, pkg/rls or anything that
	// knows about gRPC; it depends on pkg/algo and go-redis only."
	"pkg/redisalgo": {allow: []string{"pkg/algo", "pkg/shardmap"}, forbid: grpcStack},
	// "memstore must not import other backends or anything that knows
	// about gRPC." (pkg/shardmap is no backend.)
	"pkg/memstore": {allow: []string{"pkg/algo", "pkg/evict", "pkg/shardmap"}, forbid: grpcStack},
	// "denycache must not import any backend, pkg/rls or anything that
	// knows about gRPC."
	"pkg/denycache": {allow: []string{"pkg/algo", "pkg/evict", "pkg/shardmap"}, forbid: grpcStack},
	// "lease must not import any backend, pkg/rls or gRPC."
	"pkg/lease": {allow: []string{"pkg/algo", "pkg/shardmap"}, forbid: grpcStack},
	// "failover must not import any backend (pkg/memstore, pkg/redisalgo),
	// pkg/rls or anything that knows about gRPC."
	"pkg/failover": {allow: []string{"pkg/algo"}, forbid: grpcStack},
	// "stack must not parse flags, URLs or environment variables, build
	// Redis clients, or know gRPC."
	"pkg/stack": {allow: []string{
		"pkg/algo", "pkg/denycache", "pkg/failover", "pkg/lease",
		"pkg/memstore", "pkg/redisalgo", "pkg/redisclient",
	}, forbid: grpcStack, forbidDirect: []string{"flag", "net/url"}},
	// "It knows nothing about rate limits: it must not import any envoy-rls
	// package" (but the client-TLS builder, once 23b's merge lands).
	"pkg/redisclient": {allow: []string{"pkg/tlsfiles"}, forbid: grpcStack},

	// "topk must not know about gRPC, the rules or the backends."
	"pkg/topk": {allow: []string{"pkg/algo"}, forbid: append([]string{redis}, grpcStack...)},
	// "console must not decide, count or store anything": no backend, no
	// service, no Redis; it reads the sketch it is handed.
	"pkg/console": {allow: []string{"pkg/jsonhttp", "pkg/topk"}, forbid: append([]string{redis}, grpcStack...)},
	// "It must not know how limits are stored": no backend, no Redis.
	"pkg/rls": {allow: []string{"pkg/algo", "pkg/rules"}, forbid: []string{redis}},
	// "It must not talk to Redis, import the backends or gRPC types."
	"pkg/rules": {allow: []string{"pkg/algo"}, forbid: append([]string{redis}, grpcStack...)},
	// "It must not talk to Redis, import the backends, or serve anything."
	"pkg/xdsrules": {allow: []string{"pkg/rules", "pkg/tlsfiles"}, forbid: []string{redis}},
	// "It reads rules and writes only its own usage keys; it must not touch
	// the rate-limit counters or the rule files": no backend layer, and
	// the service only for its limit adjusters.
	"pkg/rlqs": {allow: []string{"pkg/algo", "pkg/rls", "pkg/rules"}},
	// "It must not see gRPC types (the service's adjusted limits reach it as
	// rls.Effective)": pkg/rls may, explain's own files may not.
	"pkg/explain": {
		allow:        []string{"pkg/algo", "pkg/jsonhttp", "pkg/redisalgo", "pkg/rls", "pkg/rules"},
		forbidDirect: grpcStack,
	},
	// Reads keys only; never a backend layer or the service.
	"pkg/inspect": {allow: []string{"pkg/algo", "pkg/redisalgo", "pkg/rules"}, forbid: grpcStack},
	// "It must not touch counters or rules: its only effect is the
	// override it writes."
	"pkg/adaptive": {allow: []string{"pkg/override"}, forbid: grpcStack},
	// "It must not touch rate-limit counters"; it may take key names
	// from pkg/redisalgo, never a backend layer.
	"pkg/override": {allow: []string{"pkg/algo", "pkg/jsonhttp", "pkg/redisalgo", "pkg/rules"}, forbid: grpcStack},
	// "it must not touch counters or any other key" than its anchors.
	"pkg/warmup": {allow: []string{"pkg/algo", "pkg/redisalgo", "pkg/rules"}, forbid: grpcStack},
	// "It plugs into the service through rls.RequestTracer ... so neither
	// the service nor the backends know a tracing library."
	"pkg/tracing": {allow: []string{"pkg/algo", "pkg/rls"}, forbidDirect: []string{envoyTypes}},
	// "It must not count anything itself, read the environment or touch
	// Prometheus."
	"pkg/refstats": {forbidDirect: []string{"github.com/prometheus/"}},
	// "It knows nothing of rate limiting itself, must not import backends."
	"pkg/admin": {forbid: grpcStack},
	// "It knows nothing of HTTP, gRPC, rules or backends and must not
	// import them."
	"pkg/readiness": {forbid: append([]string{"net/http"}, grpcStack...)},
	// It only reads files.
	"pkg/certreload": {forbid: grpcStack},

	// Test support (testKit): "must not be imported by non-test code"; the
	// entries below add only the module packages a kit package may import.
	"internal/testkit/backendtest": {allow: []string{"pkg/algo"}},
	"internal/testkit/eventually":  {},
	// "It knows nothing of envoy-rls's configs; callers hand it YAML."
	"internal/testkit/envoytest": {allow: []string{"internal/testkit/childproc"}},
	"internal/testkit/otlptest":  {},
	"internal/testkit/promtest":  {allow: []string{"internal/testkit/childproc"}},
	// "It knows nothing of pkg/algo, whose own tests import it."
	"internal/testkit/randsteps": {},
	"internal/testkit/redistest": {allow: []string{"internal/testkit/childproc", "internal/testkit/testcert"}},
	// "It imports none of the service's packages."
	"internal/testkit/refproc": {allow: []string{"internal/testkit/childproc"}},
	// "It imports none of the service's packages."
	"internal/testkit/rlsproc":    {allow: []string{"internal/testkit/childproc"}},
	"internal/testkit/rulestest":  {allow: []string{"pkg/rules"}},
	"internal/testkit/statsdtest": {allow: []string{"internal/testkit/childproc"}},
	"internal/testkit/testcert":   {},
	"internal/testkit/upstream":   {},
	"internal/testkit/xdstest":    {},
	// "It reads the repository and runs helm"; it checks nothing itself.
	"internal/testkit/shipped": {allow: []string{"internal/testkit/childproc"}},
	// "It must not read files, run Envoy or know the repository's layout."
	"internal/testkit/istiopatch": {},
	// Used by tests and by the bench and validate commands.
	"internal/testkit/childproc": {},
	// "It works on bytes and decoded objects that its caller hands it."
	"internal/testkit/kubelint": {},

	// "The package has no runtime code and must not be imported."
	"test/arch":       {sealed: true},
	"test/meshconfig": {sealed: true},
	"test/operator":   {sealed: true},
	"test/release":    {sealed: true},
	// "it imports none of envoy-rls's packages"
	"examples/xds-control-plane": {sealed: true},
	// "its tests drive the binary as a process and import none of the
	// service's packages."
	"test/docs": {sealed: true, testAllow: testKitAnd()},
	// "The package has no runtime code and must not be imported."
	"test/envoy/validate": {sealed: true},
	// "The package has no runtime code and must not be imported"; the
	// binary, istiod and Envoy are black boxes it runs as processes.
	"test/istio": {sealed: true, testAllow: testKitAnd()},
	// "Nothing here imports the service's packages: the binary is a black
	// box."
	"test/e2e": {sealed: true, testAllow: testKitAnd()},
	// envoy-rls behind a real Envoy: the binary is a black box here too.
	"test/envoy/e2e": {sealed: true, testAllow: testKitAnd("test/envoy/checks")},
	// The console in a browser, the binary a black box as in test/e2e.
	"test/console": {sealed: true, testAllow: testKitAnd()},
	// Real Envoys in front of the built binary (RLQS); the probe's own
	// minimal RLQS server uses the generated service types only.
	"test/envoy/rlqs": {sealed: true, testAllow: testKitAnd()},
	// Budgets through real Envoys in front of the built binary; its
	// recording service uses the generated service types only.
	"test/envoy/budget": {sealed: true, testAllow: testKitAnd()},
	// Commands that drive the binary as a process. The bench also starts
	// Envoys (internal/testkit/envoytest), starts the reference with
	// internal/testkit/refproc's environment (so its comparison runs the
	// reference as the reference's tests do), and sizes the RLQS
	// configuration's token bucket with pkg/rlqs's own arithmetic, so the
	// bench cannot drift from what the service assigns; --script-cost
	// measures pkg/redisalgo's scripts as the backend loads them.
	"test/bench":            {allow: []string{"internal/testkit/childproc", "internal/testkit/envoytest", "internal/testkit/refproc", "pkg/rlqs", "pkg/redisalgo"}, sealed: true},
	"test/scaling/validate": {allow: []string{"internal/testkit/childproc", "internal/testkit/redistest"}, sealed: true},
	// "it must not import the backends or the service": only the key
	// encoding and hash slot.
	"test/scaling": {allow: []string{"pkg/algo", "pkg/redisalgo"}, sealed: true},
	// "It only sends HTTP requests to the URLs it is given": the shared
	// end-to-end checks, which its command and test/meshconfig import.
	"test/envoy/checks": {stdlibOnly: true},
	// The command test/e2e/run.sh runs the checks with.
	"test/envoy/checks/cmd/envoy-checks": {allow: []string{"test/envoy/checks"}, sealed: true},
}

// testKitAnd is a test allow-list: the whole test kit, and more.
func testKitAnd(more ...string) []string {
	return append([]string{testKit + "*"}, more...)
}

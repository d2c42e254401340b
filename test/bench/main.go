// Command bench is envoy-rls's end-to-end benchmark driver (`make bench`).
//
// In one run it starts its own redis-server, a no-work gRPC server (the
// floor: this binary re-executed with the hidden --floor flag) and one
// envoy-rls process per scenario, all on free loopback ports; drives a
// bounded closed-loop gRPC load with its own generator; reads CPU time from
// /proc and Redis INFO; and prints markdown tables (see BENCHMARKS.md).
// It then checks the in-process store's memory with a million keys and runs
// a soak with random keys, sampling RSS.
//
// It must not touch anything but its own child processes, temporary
// directory and loopback ports; every child is killed on exit, on error and
// on SIGINT/SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/refproc"
)

// options are the driver's flags.
type options struct {
	bin            string
	redisServer    string
	duration       time.Duration
	warmup         time.Duration
	concurrency    int
	perConn        int
	maxRequests    int64
	users          int
	keys           int
	keysPerRequest int
	soak           time.Duration
	soakEvery      time.Duration
	scenarios      []string
	rlsArgs        []string
	// rlsEnv is added to every envoy-rls process's environment (e.g.
	// GOMAXPROCS=1, issue 42).
	rlsEnv  []string
	refEnv  []string // the same for the reference
	timeout time.Duration
	// The comparison with the reference (compare.go).
	compare  bool
	refBin   string
	rounds   int
	cmpLease bool
	// scriptCost runs only the script-cost measurement (scriptcost.go).
	scriptCost bool
	cmpOnly    []string // loads and key sets to run; empty: all
	// envoy runs only the phase through Envoy (envoy.go), on the
	// bootstrap envoyConfig.
	envoy       bool
	envoyConfig string
	// rlqsUsers is how many users (d), RLQS, draws from; 0: the 100 k
	// of (b) and (c).
	rlqsUsers int
	// rlqsDuration is (d)'s measured interval: long enough for two of
	// Envoy's 5 s usage reports to land in it.
	rlqsDuration time.Duration
	// wakeups runs only the wake-up measurement (wakeups.go), with
	// strace attached for straceWindow per system and load.
	wakeups      bool
	straceWindow time.Duration
	// keepTraces is where --wakeups keeps its execution traces (empty:
	// removed once counted).
	keepTraces string
}

func main() {
	// The floor is this binary re-executed; the flag is not in the usage
	// because only the driver passes it.
	if len(os.Args) > 1 && os.Args[1] == "--floor" {
		os.Exit(floorMain(os.Args[2:], os.Stderr))
	}
	opts, err := parseOptions(os.Args[1:], os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	// After the first signal, a second one kills the driver at once; the
	// children then die by their parent-death signal.
	context.AfterFunc(ctx, stop)
	ctx, cancel := context.WithTimeout(ctx, opts.timeout)
	switch {
	case opts.scriptCost:
		err = runScriptCost(ctx, opts, os.Stdout, os.Stderr)
	case opts.compare:
		_, err = runCompare(ctx, opts, os.Stdout, os.Stderr)
	case opts.envoy:
		_, err = runEnvoy(ctx, opts, os.Stdout, os.Stderr)
	case opts.wakeups:
		_, err = runWakeups(ctx, opts, os.Stdout, os.Stderr)
	default:
		_, err = run(ctx, opts, os.Stdout, os.Stderr)
	}
	cancel()
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.bin, "bin", "bin/envoy-rls", "envoy-rls binary to benchmark (make build)")
	fs.StringVar(&o.redisServer, "redis-server", "", "redis-server binary (default: /usr/bin/redis-server, then PATH)")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "measured interval per load scenario")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "unmeasured load before each measured interval")
	fs.IntVar(&o.concurrency, "concurrency", 32, "concurrent workers, each with one call in flight")
	fs.IntVar(&o.perConn, "workers-per-conn", 4, "workers sharing one gRPC connection")
	fs.Int64Var(&o.maxRequests, "max-requests", 2_000_000, "most calls per load scenario (warmup included)")
	fs.IntVar(&o.users, "users", 10_000, "distinct user keys the load scenarios draw from")
	fs.IntVar(&o.keys, "keys", 1_000_000, "distinct keys for the in-process memory check")
	fs.IntVar(&o.keysPerRequest, "keys-per-request", 10, "descriptors per call in the memory check")
	fs.DurationVar(&o.soak, "soak", 2*time.Minute, "random-key soak length (0 skips the soak)")
	fs.DurationVar(&o.soakEvery, "soak-every", 0, "RSS sampling period in the soak (0: soak/24, within 1s..10s)")
	scen := fs.String("scenarios", strings.Join(allScenarioNames(), ","), "comma list of phases to run; the floor runs whenever a load scenario does")
	rlsArgs := fs.String("rls-args", "", "extra arguments for every envoy-rls process, space separated")
	rlsEnv := fs.String("rls-env", "", "extra environment for every envoy-rls process, space separated NAME=value pairs (e.g. GOMAXPROCS=1)")
	refEnv := fs.String("ref-env", "", "--compare, --envoy, --wakeups: extra environment for the reference, as --rls-env (after its own settings, so it may override them)")
	fs.DurationVar(&o.timeout, "timeout", 20*time.Minute, "bound on the whole run")
	fs.BoolVar(&o.compare, "compare", false, "run only the comparison with envoyproxy/ratelimit (--ref-bin): each on its own Redis, interleaved rounds, medians; "+
		"--duration and --warmup default to 6s and 1s there")
	fs.StringVar(&o.refBin, "ref-bin", "test/bench/.bin/"+refproc.Version+"/service_cmd", "envoyproxy/ratelimit binary for --compare (make bench installs it)")
	fs.IntVar(&o.rounds, "rounds", 4, "interleaved rounds of --compare")
	fs.BoolVar(&o.cmpLease, "compare-lease", false, "--compare with lease: auto on envoy-rls's rule")
	fs.BoolVar(&o.scriptCost, "script-cost", false, "run only the script-cost measurement: Redis CPU per call of plain commands and of scripts, at 1000/s and in a closed loop, on a redis-server of its own")
	fs.BoolVar(&o.envoy, "envoy", false, "run only the phase through Envoy: HTTP through a real Envoy (--concurrency 1) with no rate-limit filter, "+
		"with the filter on envoy-rls, with it on the reference (--ref-bin), and with the rate_limit_quota filter (RLQS) on envoy-rls, each service on its own Redis; --rounds interleaved rounds, medians; "+
		"--duration and --warmup default to 6s and 1s there; --compare-only picks its loads")
	fs.StringVar(&o.envoyConfig, "envoy-config", "envoy-config/envoy.yaml", "the shipped Envoy bootstrap the phase through Envoy derives its own from")
	fs.IntVar(&o.rlqsUsers, "rlqs-users", 0, "--envoy: users the RLQS configuration (d) draws from, one bucket each; 0: the same 100 k users as the others (most requests open a new bucket); a few hundred: buckets that repeat, RLQS's steady state")
	fs.DurationVar(&o.rlqsDuration, "rlqs-duration", 10*time.Second, "--envoy: measured interval of the RLQS configuration (d); Envoy 1.40 reports usage every 5 s from its start, so 10s (after the warmup) lands two reports")
	fs.BoolVar(&o.wakeups, "wakeups", false, "run only the wake-up measurement: per decision, syscalls by kind (strace -c -f), context switches (/proc), goroutines woken (a 1 s execution trace) and service CPU (no tracer), "+
		"for the floor, the reference (--ref-bin) and envoy-rls, each on its own Redis, --rounds interleaved rounds at 1000/s, 4000/s and in the closed loop (--compare-only picks loads); --duration (the CPU window) and --warmup default to 3s and 1s there")
	fs.StringVar(&o.keepTraces, "keep-traces", "", "--wakeups: keep each execution trace in this directory, as LOAD-SYSTEM-rROUND.trace, for go tool trace (which goroutines wake, woken by whom)")
	fs.DurationVar(&o.straceWindow, "strace-window", 2*time.Second, "--wakeups: how long strace counts syscalls per system and load")
	only := fs.String("compare-only", "", "comma list of the --compare loads (1000, 4000, closed) and key sets (uniform, zipf) to run; empty: all")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for v := range strings.SplitSeq(*only, ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		if !slices.Contains([]string{"1000", "4000", "closed", "uniform", "zipf"}, v) {
			return o, fmt.Errorf("bench: --compare-only: unknown %q (want 1000, 4000, closed, uniform, zipf)", v)
		}
		o.cmpOnly = append(o.cmpOnly, v)
	}
	if n := countTrue(o.compare, o.envoy, o.scriptCost, o.wakeups); n > 1 {
		return o, errors.New("bench: --compare, --envoy, --script-cost and --wakeups each run alone: pass one")
	}
	if o.wakeups {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["duration"] {
			o.duration = 3 * time.Second
		}
		if !set["warmup"] {
			o.warmup = time.Second
		}
	}
	if o.compare || o.envoy {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["duration"] {
			o.duration = 6 * time.Second
		}
		if !set["warmup"] {
			o.warmup = time.Second
		}
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("bench: unexpected arguments %q", fs.Args())
	}
	known := allScenarioNames()
	for s := range strings.SplitSeq(*scen, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !slices.Contains(known, s) {
			return o, fmt.Errorf("bench: --scenarios: unknown %q (want %s)", s, strings.Join(known, ","))
		}
		o.scenarios = append(o.scenarios, s)
	}
	o.rlsArgs = strings.Fields(*rlsArgs)
	o.rlsEnv, o.refEnv = strings.Fields(*rlsEnv), strings.Fields(*refEnv)
	for _, kv := range append(o.rlsEnv[:len(o.rlsEnv):len(o.rlsEnv)], o.refEnv...) {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return o, fmt.Errorf("bench: --rls-env, --ref-env: %q is not NAME=value", kv)
		}
	}
	switch {
	case o.duration <= 0 || o.warmup < 0 || o.timeout <= 0 || o.soak < 0:
		return o, errors.New("bench: --duration and --timeout must be positive, --warmup and --soak not negative")
	case o.concurrency < 1 || o.perConn < 1 || o.maxRequests < 1:
		return o, errors.New("bench: --concurrency, --workers-per-conn and --max-requests must be positive")
	case o.rounds < 1:
		return o, errors.New("bench: --rounds must be positive")
	case o.straceWindow <= 0:
		return o, errors.New("bench: --strace-window must be positive")
	case o.rlqsUsers < 0 || o.rlqsDuration <= 0:
		return o, errors.New("bench: --rlqs-users must not be negative, --rlqs-duration must be positive")
	case o.users < 1 || o.keys < 0 || o.keysPerRequest < 1:
		return o, errors.New("bench: --users and --keys-per-request must be positive, --keys not negative")
	}
	return o, nil
}

// bench holds what one run started, so that close can stop all of it.
type bench struct {
	opts  options
	log   io.Writer
	tmp   string
	self  string // this executable, re-run as the floor
	users []string
	redis *redisServer

	mu         sync.Mutex
	children   []*child
	extraRedis []*redisServer // the comparison's, one per system
	cleanups   []func()       // stop the Envoys (envoytest's cleanups)
}

// addCleanup makes close run f, before it stops the children.
func (b *bench) addCleanup(f func()) {
	b.mu.Lock()
	b.cleanups = append(b.cleanups, f)
	b.mu.Unlock()
}

func (b *bench) track(c *child) {
	b.mu.Lock()
	b.children = append(b.children, c)
	b.mu.Unlock()
}

func (b *bench) close() {
	b.mu.Lock()
	cs, rs, fs := b.children, b.extraRedis, b.cleanups
	b.children, b.extraRedis, b.cleanups = nil, nil, nil
	b.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
	for _, c := range cs {
		c.stop()
	}
	for _, r := range rs {
		r.close()
	}
	if b.redis != nil {
		b.redis.close()
	}
	if b.tmp != "" {
		os.RemoveAll(b.tmp)
	}
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "bench: "+format+"\n", args...)
}

func (b *bench) wants(name string) bool { return slices.Contains(b.opts.scenarios, name) }

// newBench checks the binaries and makes the temporary directory.
func newBench(opts options, log io.Writer) (*bench, error) {
	b := &bench{opts: opts, log: log, users: makeUsers(opts.users)}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("bench: find own executable: %w", err)
	}
	b.self = self
	if opts.compare || opts.envoy || opts.wakeups {
		if b.opts.refBin, err = filepath.Abs(opts.refBin); err != nil {
			return nil, fmt.Errorf("bench: --ref-bin: %w", err)
		}
		if st, err := os.Stat(b.opts.refBin); err != nil || st.IsDir() {
			return nil, fmt.Errorf("bench: --ref-bin %s: not a file (make bench-compare or make bench-envoy installs it)", b.opts.refBin)
		}
	}
	if b.needsRLS() || opts.compare || opts.envoy || opts.wakeups {
		if b.opts.bin, err = filepath.Abs(opts.bin); err != nil {
			return nil, fmt.Errorf("bench: --bin: %w", err)
		}
		if st, err := os.Stat(b.opts.bin); err != nil || st.IsDir() {
			return nil, fmt.Errorf("bench: --bin %s: not a file (run make build first)", b.opts.bin)
		}
	}
	if b.tmp, err = os.MkdirTemp("", "envoy-rls-bench-"); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return b, nil
}

// countTrue counts the true values: the modes that run alone.
func countTrue(vs ...bool) int {
	n := 0
	for _, v := range vs {
		if v {
			n++
		}
	}
	return n
}

func (b *bench) needsRLS() bool {
	for _, s := range b.opts.scenarios {
		if s != "floor" {
			return true
		}
	}
	return false
}

// floorAgainName is the floor's second run, after the other scenarios.
const floorAgainName = "floor-again"

// selected returns the load scenarios to run, with the floor first whenever
// any runs.
func (b *bench) selected() []scenario {
	var out []scenario
	for _, s := range loadScenarios() {
		if b.wants(s.name) && (s.pacedLike == "" || b.wants(s.pacedLike)) {
			out = append(out, s)
		}
	}
	if len(out) > 0 && out[0].name != "floor" {
		out = append([]scenario{loadScenarios()[0]}, out...)
	}
	if len(out) > 1 {
		// The floor again at the end: its ratio to the first run shows how
		// much the machine drifted while the scenarios ran.
		again := out[0]
		again.name, again.title = floorAgainName, "floor again (drift check)"
		out = append(out, again)
	}
	return out
}

// results are a run's figures, for the smoke test.
type results struct {
	rows []*row
	mem  *memResult
	soak *soakResult
}

// run runs the selected phases and writes the report to stdout, progress
// to stderr. A failed phase does not stop the others; it makes the error.
func run(ctx context.Context, opts options, stdout, stderr io.Writer) (*results, error) {
	b, err := newBench(opts, stderr)
	if err != nil {
		return nil, err
	}
	defer b.close()
	scens := b.selected()
	if slices.ContainsFunc(scens, func(s scenario) bool { return s.redis }) {
		bin, err := findRedisServer(opts.redisServer)
		if err != nil {
			return nil, err
		}
		if b.redis, err = startRedis(ctx, bin, b.tmp); err != nil {
			return nil, err
		}
		b.logf("redis-server on %s", b.redis.addr)
	}
	fmt.Fprintf(stdout, "## envoy-rls benchmark, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(stdout, "%s\n\n", machineLine(opts))

	res := &results{}
	errs, err := b.runScenarios(ctx, scens, res)
	if err != nil {
		return nil, err
	}
	if len(res.rows) > 0 {
		writeLoadTables(stdout, res.rows)
		writeLeaseTable(stdout, res.rows)
	}

	if b.wants(memoryName) && opts.keys > 0 {
		b.logf("memory check: %d keys", opts.keys)
		if res.mem, err = phase(ctx, "memory check", "memory", &errs, b.memoryCheck, stdout, writeMemory); err != nil {
			return nil, err
		}
	}
	if b.wants(soakName) && opts.soak > 0 {
		b.logf("soak: %v", opts.soak)
		if res.soak, err = phase(ctx, "soak", "soak", &errs, b.soakRun, stdout, writeSoak); err != nil {
			return nil, err
		}
	}
	if b.wants(queueName) {
		b.logf("queue mode: %d held requests", queueHeld)
		if _, err = phase(ctx, "queue mode", queueName, &errs, b.queueRun, stdout, writeQueue); err != nil {
			return nil, err
		}
	}
	writeTargets(stdout, opts, res.rows, res.mem, res.soak)
	if len(errs) > 0 {
		return res, fmt.Errorf("bench: %d phase(s) failed: %w", len(errs), errors.Join(errs...))
	}
	return res, nil
}

// phase runs one of the phases after the load rows and writes its report.
// Its own failure is appended to errs (prefixed with name) and leaves the
// report out, so the other phases still run; an ended ctx (during names
// the phase) is the error, since the whole run stops. The result is what
// the phase returned, even alongside its failure, for the targets table.
func phase[R any](ctx context.Context, during, name string, errs *[]error, run func(context.Context) (*R, error), stdout io.Writer, write func(io.Writer, *R)) (*R, error) {
	r, err := run(ctx)
	if ctx.Err() != nil {
		return nil, fmt.Errorf("bench: interrupted during %s: %w", during, ctx.Err())
	}
	if err != nil {
		*errs = append(*errs, fmt.Errorf("%s: %w", name, err))
	} else {
		write(stdout, r)
	}
	return r, nil
}

// runScenarios runs the load scenarios in order into res.rows, pacing a
// paced scenario to the throughput its model reached. It returns the
// scenarios' failures, and an error only when ctx ended.
func (b *bench) runScenarios(ctx context.Context, scens []scenario, res *results) ([]error, error) {
	var errs []error
	rates := map[string]float64{}
	for _, sc := range scens {
		b.logf("scenario %s", sc.name)
		var rate float64
		if sc.pacedLike != "" {
			if rate = rates[sc.pacedLike]; rate <= 0 {
				err := fmt.Errorf("bench: %s has no throughput to pace to", sc.pacedLike)
				errs = append(errs, fmt.Errorf("%s: %w", sc.name, err))
				res.rows = append(res.rows, &row{name: sc.name, title: sc.title, err: err})
				continue
			}
		}
		r, err := b.runScenario(ctx, sc, rate)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("bench: interrupted during %s: %w", sc.name, ctx.Err())
		}
		if err != nil {
			b.logf("scenario %s failed: %v", sc.name, err)
			errs = append(errs, fmt.Errorf("%s: %w", sc.name, err))
			r = &row{name: sc.name, title: sc.title, err: err}
		}
		res.rows = append(res.rows, r)
		if err == nil {
			rates[sc.name] = r.rps
		}
	}
	return errs, nil
}

func machineLine(o options) string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	return fmt.Sprintf("Machine: %d CPUs (%s), shared by the load generator, envoy-rls and Redis; load average at start %s. "+
		"Load: closed loop, %d workers, %d per gRPC connection, %v warmup + %v measured (at most %s calls), %d distinct users.",
		numCPU(), cpu, loadAverage(), o.concurrency, o.perConn, o.warmup, o.duration, strconv.FormatInt(o.maxRequests, 10), o.users)
}

// loadAverage is the machine's 1, 5 and 15 minute load averages, or "?".
func loadAverage() string {
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			return strings.Join(f[:3], " ")
		}
	}
	return "?"
}

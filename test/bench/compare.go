package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"
	"github.com/envoy-rls/envoy-rls/internal/testkit/refproc"
)

// The comparison (--compare) runs envoyproxy/ratelimit (the reference)
// beside envoy-rls in one run: each on its own redis-server, the same
// fixed-window rule and the same requests, rounds interleaved so that the
// machine's drift falls on both alike, and medians reported with the
// no-work floor beside them.

// cmpDomain and cmpRule are the comparison's one limit: a per-user fixed
// window that never denies, so every decision does the full work of an
// admitted request. The reference's rule has no algorithm (it only has
// fixed windows); envoy-rls runs with --default-algorithm fixed_window.
const (
	cmpDomain = "bench-cmp"
	// cmpLimit is cmpRule's requests_per_unit (per second), which the
	// RLQS configuration sizes its token bucket from (quotaSizing).
	cmpLimit = 1_000_000_000
	cmpRule  = "domain: " + cmpDomain + "\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1000000000%s}\n"
)

// cmpLoad is a load shape: paced to rate calls/s, or a closed loop of
// opts.concurrency callers when rate is 0.
type cmpLoad struct {
	name, title string
	rate        float64
}

// cmpKeys is a key distribution; newValue makes one worker's value source.
type cmpKeys struct {
	name, title string
	newValue    func() func(rnd *rand.Rand, seq int64) string
}

// cmpSystem names one of the servers a round measures.
type cmpSystem int

const (
	sysFloor cmpSystem = iota
	sysRef
	sysRLS
	// sysFloorRedis is the floor that also sends one Redis command per
	// call (floor.go): measured by the wake-up runs only.
	sysFloorRedis
	numSystems
)

var systemTitles = [numSystems]string{"floor (no-work gRPC)", "envoyproxy/ratelimit", "envoy-rls", "floor + one Redis command"}

// cmpLoads lists the loads, filtered by --compare-only.
func cmpLoads(o options) []cmpLoad {
	return onlyNamed(o.cmpOnly, []cmpLoad{
		{name: "1000", title: "open loop 1000/s", rate: 1000},
		{name: "4000", title: "open loop 4000/s", rate: 4000},
		{name: "closed", title: fmt.Sprintf("closed loop, %d callers", o.concurrency)},
	}, func(l cmpLoad) string { return l.name }, []string{"1000", "4000", "closed"})
}

// onlyNamed keeps the items that only names, when only names any of all.
func onlyNamed[T any](only []string, items []T, name func(T) string, all []string) []T {
	if !slices.ContainsFunc(only, func(n string) bool { return slices.Contains(all, n) }) {
		return items
	}
	return slices.DeleteFunc(items, func(it T) bool { return !slices.Contains(only, name(it)) })
}

// Key spaces of the issue: 100 k users drawn uniformly, and 1 M users drawn
// with Zipf's law (s = 1.1), where a few keys are hot and most are cold.
const (
	uniformKeys = 100_000
	zipfKeys    = 1_000_000
	zipfS       = 1.1
)

// uniformUsers makes value sources that draw one of n users uniformly.
func uniformUsers(n int) func() func(*rand.Rand, int64) string {
	return func() func(*rand.Rand, int64) string {
		buf := make([]byte, 0, 16)
		return func(rnd *rand.Rand, _ int64) string {
			buf = strconv.AppendInt(append(buf[:0], 'u'), int64(rnd.IntN(n)), 10)
			return string(buf)
		}
	}
}

// cmpKeySets lists the key sets, filtered by --compare-only.
func cmpKeySets(o options) []cmpKeys {
	return onlyNamed(o.cmpOnly, []cmpKeys{
		{name: "uniform", title: "uniform, 100 k keys", newValue: uniformUsers(uniformKeys)},
		{name: "zipf", title: "Zipf s=1.1, 1 M keys", newValue: func() func(*rand.Rand, int64) string {
			buf := make([]byte, 0, 16)
			var z *rand.Zipf // made on first use: it needs the worker's source
			return func(rnd *rand.Rand, _ int64) string {
				if z == nil {
					z = rand.NewZipf(rnd, zipfS, 1, zipfKeys-1)
				}
				buf = strconv.AppendUint(append(buf[:0], 'u'), z.Uint64(), 10)
				return string(buf)
			}
		}},
	}, func(k cmpKeys) string { return k.name }, []string{"uniform", "zipf"})
}

// cmpSample is one measured interval of one system.
type cmpSample struct {
	row   *row
	calls map[string]float64 // INFO commandstats calls per decision
	usec  map[string]float64 // and execution µs per decision
}

// cell collects the samples of one system (or configuration) on one load
// and the failures of the intervals that gave none.
type cell[S any] struct {
	samples []S
	errs    []error
}

// cmpCell collects the samples of one system on one load and key set.
type cmpCell = cell[cmpSample]

// measureInto measures one interval with measure into cells[key]: a
// failed interval is recorded there and logged; only an ended ctx is
// returned. describe formats a sample for the log.
func measureInto[K comparable, S any](ctx context.Context, b *bench, cells map[K]*cell[S], key K, name string, measure func() (S, error), describe func(S) string) error {
	c := cells[key]
	if c == nil {
		c = &cell[S]{}
		cells[key] = c
	}
	s, err := measure()
	if ctx.Err() != nil {
		return fmt.Errorf("bench: interrupted during %s: %w", name, ctx.Err())
	}
	if err != nil {
		b.logf("%s failed: %v", name, err)
		c.errs = append(c.errs, fmt.Errorf("%s: %w", name, err))
		return nil
	}
	c.samples = append(c.samples, s)
	b.logf("  %s: %s", name, describe(s))
	return nil
}

// cellErrors returns the failures of every cell.
func cellErrors[K comparable, S any](cells map[K]*cell[S]) []error {
	var errs []error
	for _, c := range cells {
		errs = append(errs, c.errs...)
	}
	return errs
}

// cmpTarget is one running system: its server and its own Redis (nil for
// the floor).
type cmpTarget struct {
	srv *server
	rd  *redisServer
}

// cmpCellKey indexes cells; the floor's key set is always "".
type cmpCellKey struct {
	load, keys string
	sys        cmpSystem
}

// runCompare is the --compare run: it starts the three systems once, then
// measures opts.rounds interleaved rounds and writes the medians.
func runCompare(ctx context.Context, opts options, stdout, stderr io.Writer) (map[cmpCellKey]*cmpCell, error) {
	b, err := newBench(opts, stderr)
	if err != nil {
		return nil, err
	}
	defer b.close()
	targets, err := b.startCompare(ctx)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "## envoy-rls beside envoyproxy/ratelimit, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(stdout, "%s\n\n", compareMachineLine(opts))
	cells := map[cmpCellKey]*cmpCell{}
	for round := range opts.rounds {
		b.logf("round %d of %d", round+1, opts.rounds)
		if err := b.compareRound(ctx, round, targets, cells); err != nil {
			return cells, err
		}
	}
	writeCompare(stdout, opts, cells)
	if errs := cellErrors(cells); len(errs) > 0 {
		return cells, fmt.Errorf("bench: compare: %d interval(s) failed: %w", len(errs), errors.Join(errs...))
	}
	return cells, nil
}

// startCompare starts two redis-servers, the reference, envoy-rls and the
// floor.
func (b *bench) startCompare(ctx context.Context) ([numSystems]cmpTarget, error) {
	return b.startSystems(ctx, true)
}

// startSystems starts the reference and envoy-rls, each on a redis-server
// of its own and with the comparison's rule, and the no-work gRPC floor
// when withFloor is set (the phase through Envoy has a floor of its own).
func (b *bench) startSystems(ctx context.Context, withFloor bool) ([numSystems]cmpTarget, error) {
	var t [numSystems]cmpTarget
	bin, err := findRedisServer(b.opts.redisServer)
	if err != nil {
		return t, err
	}
	for _, sys := range []cmpSystem{sysRef, sysRLS} {
		rd, err := startRedisNamed(ctx, bin, b.tmp, "redis-"+strconv.Itoa(int(sys)))
		if err != nil {
			return t, err
		}
		b.trackRedis(rd)
		t[sys].rd = rd
	}
	if withFloor {
		if t[sysFloor].srv, err = b.startServerOn(ctx, "cmp-floor", true, nil, ""); err != nil {
			return t, err
		}
	}
	if t[sysRef].srv, err = b.startReference(ctx, t[sysRef].rd); err != nil {
		return t, err
	}
	lease := ""
	if b.opts.cmpLease {
		lease = ", lease: auto"
	}
	args := []string{"--default-algorithm", "fixed_window"}
	if t[sysRLS].srv, err = b.startServerOn(ctx, "cmp-envoy-rls", false, t[sysRLS].rd, fmt.Sprintf(cmpRule, lease), args...); err != nil {
		return t, err
	}
	b.logf("reference on %s (Redis %s), envoy-rls on %s (Redis %s)", t[sysRef].srv.grpcAddr, t[sysRef].rd.addr, t[sysRLS].srv.grpcAddr, t[sysRLS].rd.addr)
	return t, nil
}

// startOnOwnRedis starts a server (the floor, or envoy-rls with rules)
// named name on a redis-server of its own.
func (b *bench) startOnOwnRedis(ctx context.Context, name string, floor bool, rules string) (cmpTarget, error) {
	var t cmpTarget
	bin, err := findRedisServer(b.opts.redisServer)
	if err != nil {
		return t, err
	}
	if t.rd, err = startRedisNamed(ctx, bin, b.tmp, "redis-"+name); err != nil {
		return t, err
	}
	b.trackRedis(t.rd)
	t.srv, err = b.startServerOn(ctx, name, floor, t.rd, rules)
	return t, err
}

// startReference starts the reference binary with refproc's environment
// (the one the reference's tests use, so the two cannot drift) but for its
// log level, and its rule file under refproc.RulesDir, and waits for its
// /healthcheck.
func (b *bench) startReference(ctx context.Context, rd *redisServer) (*server, error) {
	dir := filepath.Join(b.tmp, "reference")
	cfgDir := refproc.RulesDir(dir)
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "bench.yaml"), []byte(fmt.Sprintf(cmpRule, "")), 0o644); err != nil {
		return nil, fmt.Errorf("bench: write reference rules: %w", err)
	}
	for attempt := 0; ; attempt++ {
		ports, err := childproc.FreePorts(3)
		if err != nil {
			return nil, err
		}
		// warn: the bench reads no log line of the reference's, and info
		// logs would cost it time the comparison counts.
		env := append(refproc.Env(dir, rd.addr, ports[0], ports[1], ports[2]), "LOG_LEVEL=warn")
		env = append(env, b.opts.refEnv...)
		p, err := startChildEnv("reference", dir, env, b.opts.refBin)
		if err != nil {
			return nil, err
		}
		b.track(p)
		s := &server{proc: p, grpcAddr: "127.0.0.1:" + strconv.Itoa(ports[1]), httpAddr: "127.0.0.1:" + strconv.Itoa(ports[0]), debugAddr: "127.0.0.1:" + strconv.Itoa(ports[2])}
		err = waitHTTPReady(ctx, p, "http://"+s.httpAddr+"/healthcheck", 30*time.Second)
		if err == nil {
			return s, nil
		}
		p.stop()
		if !bindFailed(p) || attempt == 3 {
			return nil, err
		}
	}
}

// compareRound measures, per load, the floor and then both systems on each
// key set; the two systems swap order every round so that neither always
// runs on the warmer (or busier) machine.
func (b *bench) compareRound(ctx context.Context, round int, t [numSystems]cmpTarget, cells map[cmpCellKey]*cmpCell) error {
	order := []cmpSystem{sysRef, sysRLS}
	if round%2 == 1 {
		order = []cmpSystem{sysRLS, sysRef}
	}
	uniform := cmpKeySets(b.opts)[0]
	for _, load := range cmpLoads(b.opts) {
		if err := b.compareOne(ctx, t[sysFloor], load, uniform, cmpCellKey{load.name, "", sysFloor}, cells); err != nil {
			return err
		}
		for _, keys := range cmpKeySets(b.opts) {
			for _, sys := range order {
				if err := b.compareOne(ctx, t[sys], load, keys, cmpCellKey{load.name, keys.name, sys}, cells); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// compareOne measures one interval into its cell. A failed interval is
// recorded in the cell; only an ended ctx is returned.
func (b *bench) compareOne(ctx context.Context, t cmpTarget, load cmpLoad, keys cmpKeys, key cmpCellKey, cells map[cmpCellKey]*cmpCell) error {
	return measureInto(ctx, b, cells, key, fmt.Sprintf("%s/%s/%s", load.name, keys.name, systemTitles[key.sys]),
		func() (cmpSample, error) { return b.measureTarget(ctx, t, load, keys) },
		func(s cmpSample) string {
			return fmt.Sprintf("%.0f/s, p50 %v, p99 %v, service %.1f µs, Redis %.1f µs", s.row.rps, s.row.p50, s.row.p99, s.row.srvCPU, s.row.redisCPU)
		})
}

func (b *bench) measureTarget(ctx context.Context, t cmpTarget, load cmpLoad, keys cmpKeys) (cmpSample, error) {
	if t.rd != nil {
		if err := t.rd.flush(ctx); err != nil {
			return cmpSample{}, err
		}
	}
	cfg := loadConfig{
		target: t.srv.grpcAddr, concurrency: b.opts.concurrency, perConn: b.opts.perConn,
		warmup: b.opts.warmup, duration: b.opts.duration, maxRequests: b.opts.maxRequests, rate: load.rate,
	}
	before, after, snapErr := snapEdges(&cfg, func(start bool) (snapshot, error) { return snapOn(ctx, t.srv, t.rd, start) })
	res, err := runLoad(ctx, cfg, oneEntry(cmpDomain, "user", keys.newValue))
	if err != nil {
		return cmpSample{}, err
	}
	if err := snapErr(); err != nil {
		return cmpSample{}, err
	}
	if t.srv.proc.exited() {
		return cmpSample{}, fmt.Errorf("bench: server exited during the run:\n%s", t.srv.proc.logTail())
	}
	// A few errors (a Redis call past envoy-rls's 100 ms timeout on a
	// loaded machine) leave the interval measured; they are reported.
	if res.answered() == 0 || res.errors*100 > res.answered() {
		return cmpSample{}, fmt.Errorf("bench: %d answered, %d errors (first: %v)", res.answered(), res.errors, res.firstErr)
	}
	r := newRow(scenario{name: load.name + "/" + keys.name, redis: t.rd != nil}, res, *before, *after)
	s := cmpSample{row: r, calls: map[string]float64{}, usec: map[string]float64{}}
	if t.rd != nil {
		d := after.redis.sub(before.redis)
		for name, n := range d.calls {
			s.calls[name] = float64(n) / float64(r.decisions)
			s.usec[name] = float64(d.usec[name]) / float64(r.decisions)
		}
	}
	return s, nil
}

// trackRedis makes close stop rd as well.
func (b *bench) trackRedis(rd *redisServer) {
	b.mu.Lock()
	b.extraRedis = append(b.extraRedis, rd)
	b.mu.Unlock()
}

func compareMachineLine(o options) string {
	return fmt.Sprintf("%s Comparison: %d interleaved rounds, each %v warmup + %v measured per system and scenario; medians; "+
		"open loop = %d workers paced to the rate (each sends when its call is due, so the rate holds while latency stays under workers/rate).",
		machineLine(o), o.rounds, o.warmup, o.duration, o.concurrency)
}

// median returns the median of the figure get over the samples (the mean
// of the middle two for an even count).
func median[S any](samples []S, get func(S) float64) float64 {
	if len(samples) == 0 {
		return 0
	}
	v := make([]float64, len(samples))
	for i, s := range samples {
		v[i] = get(s)
	}
	sort.Float64s(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// cmpFigures are a cell's medians.
type cmpFigures struct {
	ok                      bool
	rps, p50, p99           float64 // p50, p99 in µs
	srvCPU, redisCPU, total float64 // µs per decision
	other                   float64 // % of the machine outside the bench
	errors                  int64   // RPC errors over all samples
	calls, usec             map[string]float64
	// reads is Redis's socket reads per decision: round trips, so below
	// 1 when requests share them; in and out its network bytes per
	// decision.
	reads, in, out float64
	n, failures    int
}

func figures(c *cmpCell) cmpFigures {
	if c == nil || len(c.samples) == 0 {
		f := cmpFigures{}
		if c != nil {
			f.failures = len(c.errs)
		}
		return f
	}
	s := c.samples
	f := cmpFigures{
		ok:       true,
		rps:      median(s, func(x cmpSample) float64 { return x.row.rps }),
		p50:      median(s, func(x cmpSample) float64 { return micros(x.row.p50) }),
		p99:      median(s, func(x cmpSample) float64 { return micros(x.row.p99) }),
		srvCPU:   median(s, func(x cmpSample) float64 { return x.row.srvCPU }),
		redisCPU: median(s, func(x cmpSample) float64 { return x.row.redisCPU }),
		total:    median(s, func(x cmpSample) float64 { return x.row.srvCPU + x.row.redisCPU }),
		other:    median(s, func(x cmpSample) float64 { return x.row.other }),
		reads:    median(s, func(x cmpSample) float64 { return x.row.redisReads }),
		in:       median(s, func(x cmpSample) float64 { return x.row.redisIn }),
		out:      median(s, func(x cmpSample) float64 { return x.row.redisOut }),
		calls:    map[string]float64{},
		usec:     map[string]float64{},
		n:        len(s),
		failures: len(c.errs),
	}
	names := map[string]bool{}
	for _, x := range s {
		for name := range x.calls {
			names[name] = true
		}
	}
	for _, x := range s {
		f.errors += x.row.errors
	}
	for name := range names {
		f.calls[name] = median(s, func(x cmpSample) float64 { return x.calls[name] })
		f.usec[name] = median(s, func(x cmpSample) float64 { return x.usec[name] })
	}
	return f
}

// writeCompare writes the comparison tables: figures with ratios, Redis's
// command mix, and the targets.
func writeCompare(w io.Writer, o options, cells map[cmpCellKey]*cmpCell) {
	tableHead(w, fmt.Sprintf("envoy-rls and envoyproxy/ratelimit, medians of %d rounds (ratio envoy-rls / reference; floor ratio to the reference in parentheses)", o.rounds),
		"load", "keys", "system", "decisions/s", "p50 µs", "p99 µs", "service CPU µs/decision", "Redis CPU µs/decision", "service + Redis CPU µs/decision", "RPC errors", "other load")
	for _, load := range cmpLoads(o) {
		fl := figures(cells[cmpCellKey{load.name, "", sysFloor}])
		for _, keys := range cmpKeySets(o) {
			ref := figures(cells[cmpCellKey{load.name, keys.name, sysRef}])
			rls := figures(cells[cmpCellKey{load.name, keys.name, sysRLS}])
			writeFigRow(w, load.title, keys.title, systemTitles[sysFloor], fl, ref)
			writeFigRow(w, "", "", systemTitles[sysRef], ref, cmpFigures{})
			writeFigRow(w, "", "", systemTitles[sysRLS], rls, ref)
		}
	}
	fmt.Fprintln(w)
	tableHead(w, "Redis INFO commandstats per decision (calls, execution µs; commands a script runs included) and socket reads and network bytes per decision (total_reads_processed: round trips, below 1 when requests share them; total_net_input_bytes, total_net_output_bytes)", "load", "keys", "envoyproxy/ratelimit", "envoy-rls")
	for _, load := range cmpLoads(o) {
		for _, keys := range cmpKeySets(o) {
			ref := figures(cells[cmpCellKey{load.name, keys.name, sysRef}])
			rls := figures(cells[cmpCellKey{load.name, keys.name, sysRLS}])
			fmt.Fprintf(w, "| %s | %s | %s | %s |\n", load.title, keys.title, cmdMix(ref), cmdMix(rls))
		}
	}
	fmt.Fprintln(w)
	writeCompareTargets(w, o, cells)
}

// writeFigRow writes one system's medians; with a reference (base.ok) each
// figure is followed by its ratio to it.
func writeFigRow(w io.Writer, load, keys, system string, f, base cmpFigures) {
	if !f.ok {
		fmt.Fprintf(w, "| %s | %s | %s | no sample (%d failed) | | | | | | | |\n", load, keys, system, f.failures)
		return
	}
	r := func(v, b float64, format string) string {
		if !base.ok {
			return fmt.Sprintf(format, v)
		}
		return withRatio(v, b, format)
	}
	redis, total := "—", "—"
	if f.redisCPU > 0 {
		redis, total = r(f.redisCPU, base.redisCPU, "%.1f"), r(f.total, base.total, "%.1f")
	} else if base.ok {
		total = r(f.total, base.total, "%.1f")
	}
	errs := fmt.Sprint(f.errors)
	if f.failures > 0 {
		errs += fmt.Sprintf(" (%d of %d intervals failed)", f.failures, f.failures+f.n)
	}
	fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.0f%% |\n", load, keys, system,
		r(f.rps, base.rps, "%.0f"), r(f.p50, base.p50, "%.0f"), r(f.p99, base.p99, "%.0f"),
		r(f.srvCPU, base.srvCPU, "%.1f"), redis, total, errs, f.other)
}

// cmdMix formats a system's commands per decision, most frequent first.
func cmdMix(f cmpFigures) string {
	if !f.ok {
		return "—"
	}
	names := make([]string, 0, len(f.calls))
	for n, c := range f.calls {
		if c >= 0.001 && n != "info" && n != "flushall" {
			names = append(names, n)
		}
	}
	sort.Slice(names, func(i, j int) bool {
		if f.calls[names[i]] != f.calls[names[j]] {
			return f.calls[names[i]] > f.calls[names[j]]
		}
		return names[i] < names[j]
	})
	parts := make([]string, len(names))
	var us float64
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %.3f × %.1f µs", strings.ReplaceAll(n, "|", " "), f.calls[n], f.usec[n]/f.calls[n])
		us += f.usec[n]
	}
	return fmt.Sprintf("%s (%.1f µs executing); %.3f socket reads, %.0f B in, %.0f B out", strings.Join(parts, ", "), us, f.reads, f.in, f.out)
}

// cmpGoal is one figure an issue sets a target on: a ratio envoy-rls /
// reference of the medians, or, absolute, envoy-rls's own figure.
type cmpGoal struct {
	figure   string
	get      func(cmpFigures) float64
	limit    float64
	atLeast  bool
	absolute bool
}

// commandsPerDecision is every Redis command per decision but the
// driver's own (INFO, FLUSHALL): the commands the decision, the clock
// reads and the override polling cost.
func commandsPerDecision(f cmpFigures) float64 {
	var n float64
	for name, c := range f.calls {
		if name != "info" && name != "flushall" {
			n += c
		}
	}
	return n
}

// writeCompareTargets sets the medians against issue 19's targets and
// issue 33's (one Redis command per decision, Redis CPU at most half the
// reference's). It reports; it asserts nothing.
func writeCompareTargets(w io.Writer, o options, cells map[cmpCellKey]*cmpCell) {
	p50 := cmpGoal{figure: "p50", get: func(f cmpFigures) float64 { return f.p50 }, limit: 0.9}
	p99 := cmpGoal{figure: "p99", get: func(f cmpFigures) float64 { return f.p99 }, limit: 1.0}
	redisCPU := func(limit float64) cmpGoal {
		return cmpGoal{figure: "Redis CPU/decision", get: func(f cmpFigures) float64 { return f.redisCPU }, limit: limit}
	}
	total := func(limit float64) cmpGoal {
		return cmpGoal{figure: "total CPU/decision", get: func(f cmpFigures) float64 { return f.total }, limit: limit}
	}
	commands := cmpGoal{figure: "Redis commands/decision (envoy-rls)", get: commandsPerDecision, limit: 1.1, absolute: true}
	writeGoals(w, o, cells, "Targets (issue 19; ratios envoy-rls / reference of the medians; reported, not asserted)",
		[]cmpGoal{p50, p99, redisCPU(1.0), total(0.9)},
		[]cmpGoal{{figure: "decisions/s", get: func(f cmpFigures) float64 { return f.rps }, limit: 1.4, atLeast: true}, redisCPU(0.6), total(0.6)})
	writeGoals(w, o, cells, "Targets (issue 33; ratios envoy-rls / reference of the medians, commands absolute; reported, not asserted)",
		[]cmpGoal{redisCPU(0.5), commands}, []cmpGoal{redisCPU(0.5), commands})
}

// writeGoals writes one issue's targets: paced for the open loops, closed
// for the closed loop.
func writeGoals(w io.Writer, o options, cells map[cmpCellKey]*cmpCell, title string, paced, closed []cmpGoal) {
	tableHead(w, title, "load", "keys", "figure", "target", "measured", "")
	for _, load := range cmpLoads(o) {
		ts := paced
		if load.rate == 0 {
			ts = closed
		}
		for _, keys := range cmpKeySets(o) {
			ref := figures(cells[cmpCellKey{load.name, keys.name, sysRef}])
			rls := figures(cells[cmpCellKey{load.name, keys.name, sysRLS}])
			if !ref.ok || !rls.ok {
				continue
			}
			for _, t := range ts {
				v, unit := t.get(rls)/t.get(ref), "×"
				if t.absolute {
					v, unit = t.get(rls), ""
				}
				ok := v <= t.limit
				cmp := "≤"
				if t.atLeast {
					ok, cmp = v >= t.limit, "≥"
				}
				verdict := "not met"
				if ok {
					verdict = "met"
				}
				fmt.Fprintf(w, "| %s | %s | %s | %s %.1f%s | %.2f%s | %s |\n", load.title, keys.title, t.figure, cmp, t.limit, unit, v, unit, verdict)
			}
		}
	}
	fmt.Fprintln(w)
}

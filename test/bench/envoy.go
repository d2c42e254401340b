package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/envoytest"
)

// The phase through Envoy (--envoy, issue 29) measures what a user behind
// Envoy sees: HTTP requests from the driver to a real Envoy (the shipped
// bootstrap, rewritten by envoyconf.go), which asks a rate-limit service
// about each one and forwards it to a Go upstream (the floor's HTTP
// listener). Four Envoys, one per configuration:
//
//	(a) no rate-limit filter: the floor, what Envoy and the upstream cost;
//	(b) the filter → envoy-rls on its own Redis (fixed windows);
//	(c) the same filter → the reference on its own Redis, same rule file;
//	(d) the rate_limit_quota filter (RLQS, issue 31) → a second envoy-rls
//	    on its own Redis, same rule file: one bucket per user, each
//	    assigned a token bucket of the rule's limit, so Envoy admits every
//	    request itself and only reports usage (every 5 s, and once when a
//	    bucket is new).
//
// (d)'s Envoy is started for each interval and stopped after it: its
// buckets (one per user seen) would otherwise pile up over the run, and
// Envoy reports every one of them every 5 s while the other
// configurations are measured.
//
// The services, their Redis servers and the rule are the comparison's
// (startSystems, cmpRule: a per-user limit that never denies, so every
// request costs a full decision). Rounds interleave the configurations;
// every figure is a median over rounds, and the targets are set against
// ratios taken within each round.

// envoyConfig names one of the three configurations.
type envoyConfig int

const (
	cfgFloor envoyConfig = iota
	cfgRLS
	cfgRef
	cfgQuota
	numEnvoyConfigs
)

var envoyConfigTitles = [numEnvoyConfigs]string{
	"(a) Envoy, no rate-limit filter",
	"(b) Envoy → envoy-rls",
	"(c) Envoy → envoyproxy/ratelimit",
	"(d) Envoy RLQS → envoy-rls",
}

// envoyModes is each configuration's filter.
var envoyModes = [numEnvoyConfigs]filterMode{cfgFloor: noFilter, cfgRLS: shouldLimit, cfgRef: shouldLimit, cfgQuota: quotaBuckets}

// envoyStack is one configuration as started: its Envoy, the listener
// address the driver sends to, and, except for the floor, the rate-limit
// service and its Redis.
type envoyStack struct {
	envoy    *envoytest.Envoy
	addr     string
	svc      *server
	rd       *redisServer
	upstream *server
	// statPrefix selects the filter's counters, kept under the route's
	// target cluster.
	statPrefix string
	// quota marks (d): no per-request calls to count, and an Envoy
	// started per interval (name, bootstrap) instead of once.
	quota     bool
	name      string
	bootstrap []byte
}

// envoyCellKey indexes the samples: one load, one configuration.
type envoyCellKey struct {
	load string
	cfg  envoyConfig
}

// envoyCell collects one configuration's samples on one load.
type envoyCell = cell[envoySample]

// envoySample is one measured interval. CPU figures are µs per request
// (an HTTP request answered 200 or 429).
type envoySample struct {
	round      int
	requests   int64
	rps        float64
	p50, p99   float64 // µs
	envoyCPU   float64
	svcCPU     float64
	redisCPU   float64
	upCPU      float64 // the upstream
	genCPU     float64 // the driver: load generator and the upstream's client
	other      float64 // % of the machine outside the processes above
	httpErrors int64
	firstErr   error
	denied     int64
	// rlCalls and rlErrors are Envoy's own count of the filter's calls
	// (ratelimit.ok + over_limit + error) and failed calls (error: the
	// service's error or the filter's timeout).
	rlCalls, rlErrors int64
	// With RLQS, from envoy-rls's metrics: requests Envoy reported in the
	// interval, token-bucket assignments sent since the interval's Envoy
	// started (warmup included), usage store failures in the interval.
	quota                               bool
	reported, tokenBuckets, usageErrors int64
}

// total is the CPU per request of the parts the targets count: Envoy,
// the rate-limit service and its Redis.
func (s envoySample) total() float64 { return s.envoyCPU + s.svcCPU + s.redisCPU }

// envoySnap is the counters read at one edge of a measured interval.
type envoySnap struct {
	envoy, svc, upstream, gen, busy time.Duration
	redis                           redisStats
	rl                              map[string]int64
	// quota is envoy-rls's RLQS counters (quotaCounters), with RLQS.
	quota quotaCounts
}

// envoyResults are the phase's samples, for the caller.
type envoyResults struct {
	cells map[envoyCellKey]*envoyCell
}

// runEnvoy is the --envoy run: it starts the three configurations once,
// measures opts.rounds interleaved rounds and writes the tables.
func runEnvoy(ctx context.Context, opts options, stdout, stderr io.Writer) (*envoyResults, error) {
	b, err := newBench(opts, stderr)
	if err != nil {
		return nil, err
	}
	defer b.close()
	shipped, err := os.ReadFile(opts.envoyConfig)
	if err != nil {
		return nil, fmt.Errorf("bench: --envoy-config: %w", err)
	}
	if err := quotaSizing(cmpLimit, opts.maxRequests); err != nil {
		return nil, err
	}
	stacks, err := b.startEnvoyStacks(ctx, shipped)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "## Through Envoy: envoy-rls beside envoyproxy/ratelimit, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(stdout, "%s\n\n", envoyMachineLine(opts))
	res := &envoyResults{cells: map[envoyCellKey]*envoyCell{}}
	for round := range opts.rounds {
		b.logf("round %d of %d", round+1, opts.rounds)
		for _, load := range cmpLoads(opts) {
			for _, c := range envoyOrder(round) {
				if err := b.envoyOne(ctx, round, stacks[c], load, envoyCellKey{load.name, c}, res.cells); err != nil {
					return res, err
				}
			}
		}
	}
	writeEnvoy(stdout, opts, res.cells)
	if errs := cellErrors(res.cells); len(errs) > 0 {
		return res, fmt.Errorf("bench: envoy: %d interval(s) failed: %w", len(errs), errors.Join(errs...))
	}
	return res, nil
}

// envoyOrder is a round's order: the floor first, then the three
// services, rotated one place every round so that none always runs on the
// warmer (or busier) machine.
func envoyOrder(round int) []envoyConfig {
	svcs := []envoyConfig{cfgRLS, cfgRef, cfgQuota}
	out := []envoyConfig{cfgFloor}
	for i := range svcs {
		out = append(out, svcs[(round+i)%len(svcs)])
	}
	return out
}

// startEnvoyStacks starts the services (startSystems, no gRPC floor, and
// envoy-rls for RLQS on a Redis of its own), the upstream, and one Envoy
// per configuration except (d), whose Envoy each interval starts.
func (b *bench) startEnvoyStacks(ctx context.Context, shipped []byte) ([numEnvoyConfigs]*envoyStack, error) {
	var st [numEnvoyConfigs]*envoyStack
	sys, err := b.startSystems(ctx, false)
	if err != nil {
		return st, err
	}
	// The floor process's HTTP listener answers every path: the upstream.
	up, err := b.startServerOn(ctx, "envoy-upstream", true, nil, "")
	if err != nil {
		return st, err
	}
	quota, err := b.startQuotaService(ctx)
	if err != nil {
		return st, err
	}
	svcs := [numEnvoyConfigs]cmpTarget{cfgRLS: sys[sysRLS], cfgRef: sys[sysRef], cfgQuota: quota}
	for c := range numEnvoyConfigs {
		s := &envoyStack{svc: svcs[c].srv, rd: svcs[c].rd, upstream: up, quota: c == cfgQuota}
		rls := ""
		if s.svc != nil {
			rls = s.svc.grpcAddr
		}
		bootstrap, target, err := benchBootstrap(shipped, up.httpAddr, rls, envoyModes[c])
		if err != nil {
			return st, err
		}
		s.statPrefix = "cluster." + target + ".ratelimit."
		s.name = []string{"envoy-floor", "envoy-envoy-rls", "envoy-reference", "envoy-rlqs"}[c]
		s.bootstrap = bootstrap
		st[c] = s
		if s.quota {
			continue
		}
		if err := b.upEnvoy(s); err != nil {
			return st, err
		}
		b.logf("%s: listener %s, admin %s", envoyConfigTitles[c], s.addr, s.envoy.AdminURL)
	}
	return st, nil
}

// startQuotaService starts (d)'s envoy-rls (RLQS is on its gRPC port) on
// a Redis of its own, with the comparison's rule.
func (b *bench) startQuotaService(ctx context.Context) (cmpTarget, error) {
	t, err := b.startOnOwnRedis(ctx, "rlqs-envoy-rls", false, fmt.Sprintf(cmpRule, ""))
	if err != nil {
		return t, err
	}
	b.logf("(d) RLQS: envoy-rls on %s (Redis %s)", t.srv.grpcAddr, t.rd.addr)
	return t, nil
}

// upEnvoy starts the stack's Envoy and reads its listener's address.
func (b *bench) upEnvoy(s *envoyStack) error {
	var err error
	if s.envoy, err = b.startEnvoy(s.name, s.bootstrap); err != nil {
		return err
	}
	if s.addr, err = s.envoy.ListenerAddr(envoyListenerName); err != nil {
		s.envoy.Stop()
		return fmt.Errorf("bench: %s: %w", s.name, err)
	}
	return nil
}

// envoyFatal carries an envoytest failure out of Start (see benchTB).
type envoyFatal string

// benchTB is the testing.TB that internal/testkit/envoytest's helpers take, for a
// driver that has none: a failure ends the helper by a panic that
// startEnvoy turns back into an error, and cleanups (stopping Envoy) run
// when the bench closes.
type benchTB struct {
	b      *bench
	failed bool
}

func (t *benchTB) Helper()                         {}
func (t *benchTB) Logf(format string, args ...any) { t.b.logf(format, args...) }
func (t *benchTB) Failed() bool                    { return t.failed }
func (t *benchTB) Cleanup(f func())                { t.b.addCleanup(f) }
func (t *benchTB) Fatalf(format string, args ...any) {
	t.failed = true
	panic(envoyFatal(fmt.Sprintf(format, args...)))
}

func (t *benchTB) TempDir() string {
	dir, err := os.MkdirTemp(t.b.tmp, "envoy-")
	if err != nil {
		t.Fatalf("bench: %v", err)
	}
	return dir
}

// startEnvoy starts Envoy on bootstrap with --concurrency 1 (one worker
// thread: the machine has two CPUs for everything).
func (b *bench) startEnvoy(name string, bootstrap []byte) (e *envoytest.Envoy, err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(envoyFatal)
			if !ok {
				panic(r)
			}
			err = fmt.Errorf("bench: %s: %s", name, string(f))
		}
	}()
	return envoytest.Start(&benchTB{b: b}, bootstrap, envoytest.Options{Concurrency: 1, Name: name}), nil
}

// envoyOne measures one interval into its cell. A failed interval is
// recorded in the cell; only an ended ctx is returned.
func (b *bench) envoyOne(ctx context.Context, round int, st *envoyStack, load cmpLoad, key envoyCellKey, cells map[envoyCellKey]*envoyCell) error {
	return measureInto(ctx, b, cells, key, fmt.Sprintf("%s/%s", load.name, envoyConfigTitles[key.cfg]),
		func() (envoySample, error) { return b.measureEnvoy(ctx, st, load, round) },
		func(s envoySample) string {
			return fmt.Sprintf("%.0f/s, p50 %.0f µs, p99 %.0f µs, Envoy %.1f + service %.1f + Redis %.1f µs/request",
				s.rps, s.p50, s.p99, s.envoyCPU, s.svcCPU, s.redisCPU)
		})
}

func (b *bench) measureEnvoy(ctx context.Context, st *envoyStack, load cmpLoad, round int) (envoySample, error) {
	if st.rd != nil {
		if err := st.rd.flush(ctx); err != nil {
			return envoySample{}, err
		}
	}
	// (d): envoy-rls's counters before its fresh Envoy asks anything, so
	// that the token buckets counted are those this Envoy holds (assigned
	// in the warmup, when the buckets are few, or in the interval).
	var quota0 quotaCounts
	if st.quota {
		var err error
		if quota0, err = quotaCounters(ctx, "http://"+st.svc.httpAddr+"/metrics"); err != nil {
			return envoySample{}, err
		}
		if err := b.upEnvoy(st); err != nil {
			return envoySample{}, err
		}
		defer killEnvoy(st.envoy)
	}
	cfg := loadConfig{
		concurrency: b.opts.concurrency, warmup: b.opts.warmup, duration: b.opts.duration,
		maxRequests: b.opts.maxRequests, rate: load.rate,
	}
	if st.quota {
		cfg.duration = b.opts.rlqsDuration
	}
	before, after, snapErr := snapEdges(&cfg, func(start bool) (envoySnap, error) { return snapEnvoy(ctx, st, start) })
	keys := uniformKeySet()
	if st.quota && b.opts.rlqsUsers > 0 {
		keys = cmpKeys{name: "rlqs", newValue: uniformUsers(b.opts.rlqsUsers)}
	}
	res, err := runHTTP(ctx, cfg, "http://"+st.addr+"/", keys)
	if err != nil {
		return envoySample{}, err
	}
	if err := snapErr(); err != nil {
		return envoySample{}, err
	}
	for _, p := range []*child{procOf(st.svc), st.upstream.proc} {
		if p != nil && p.exited() {
			return envoySample{}, fmt.Errorf("bench: %s exited during the run:\n%s", p.name, p.logTail())
		}
	}
	if st.envoy.Exited() {
		return envoySample{}, fmt.Errorf("bench: envoy exited during the run:\n%s", st.envoy.Logs.String())
	}
	s := envoySampleOf(round, res, *before, *after, st.statPrefix, numCPU())
	if st.quota {
		s.quota = true
		s.reported = after.quota.reported - before.quota.reported
		s.tokenBuckets = after.quota.tokenBuckets - quota0.tokenBuckets
		s.usageErrors = after.quota.usageErrors - before.quota.usageErrors
	}
	return s, s.problem(st.svc != nil)
}

// killEnvoy ends (d)'s per-interval Envoy at once. Envoy 1.40 takes
// 11–12 s to exit on SIGTERM when it holds tens of thousands of RLQS
// buckets (measured at 4000/s over 100 000 users), which would add
// minutes to the phase, and nothing of its state outlives the interval.
func killEnvoy(e *envoytest.Envoy) {
	if pid, err := e.Pid(); err == nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	e.Stop() // reaps it (or, if the kill failed, stops it the slow way)
}

func procOf(s *server) *child {
	if s == nil {
		return nil
	}
	return s.proc
}

// uniformKeySet is the comparison's uniform key set (100 k users),
// whatever --compare-only says.
func uniformKeySet() cmpKeys { return cmpKeySets(options{})[0] }

// runHTTP drives HTTP GETs to url through runCalls, each with the user
// header drawn from keys, every worker on a keep-alive connection of its
// own. A 200 is admitted, a 429 denied, anything else an error.
func runHTTP(ctx context.Context, cfg loadConfig, url string, keys cmpKeys) (*loadResult, error) {
	tr := &http.Transport{
		MaxIdleConns: cfg.concurrency, MaxIdleConnsPerHost: cfg.concurrency, MaxConnsPerHost: cfg.concurrency,
		IdleConnTimeout: time.Minute, DisableCompression: true,
	}
	defer tr.CloseIdleConnections()
	// The timeout only keeps a hung request from hanging the run.
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	return runCalls(ctx, cfg, func(int) callFunc {
		value := keys.newValue()
		return func(ctx context.Context, rnd *rand.Rand, seq int64) (bool, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return false, fmt.Errorf("bench: http: %w", err)
			}
			req.Header.Set(userHeader, value(rnd, seq))
			resp, err := client.Do(req)
			if err != nil {
				return false, err
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch {
			case err != nil:
				return false, fmt.Errorf("bench: http: read body: %w", err)
			case resp.StatusCode == http.StatusOK:
				return false, nil
			case resp.StatusCode == http.StatusTooManyRequests:
				return true, nil
			default:
				return false, fmt.Errorf("bench: http: %s", resp.Status)
			}
		}
	})
}

// snapEnvoy reads the CPU time of every process of the stack, the driver
// and the machine, Redis INFO, and Envoy's rate-limit counters. The admin
// call costs Envoy CPU, so it happens outside the measured interval:
// before the CPU reads at the start, after them at the end.
func snapEnvoy(ctx context.Context, st *envoyStack, start bool) (envoySnap, error) {
	var s envoySnap
	stats := func() error {
		var err error
		switch {
		case st.quota:
			s.quota, err = quotaCounters(ctx, "http://"+st.svc.httpAddr+"/metrics")
		case st.svc != nil:
			s.rl, err = st.envoy.Stats(st.statPrefix)
		}
		return err
	}
	if start {
		if err := stats(); err != nil {
			return s, err
		}
	}
	pid, err := st.envoy.Pid()
	if err != nil {
		return s, err
	}
	var errs []error
	read := func(dst *time.Duration, pid int) {
		v, err := procCPU(pid)
		*dst = v
		errs = append(errs, err)
	}
	read(&s.envoy, pid)
	if st.svc != nil {
		read(&s.svc, st.svc.proc.pid())
	}
	read(&s.upstream, st.upstream.proc.pid())
	read(&s.gen, os.Getpid())
	var berr error
	s.busy, berr = machineBusy()
	if err := errors.Join(append(errs, berr)...); err != nil {
		return s, err
	}
	if st.rd != nil {
		if s.redis, err = st.rd.stats(ctx); err != nil {
			return s, err
		}
	}
	if !start {
		if err := stats(); err != nil {
			return s, err
		}
	}
	return s, nil
}

// envoySampleOf turns a measured interval and its two snapshots into
// per-request figures; statPrefix names Envoy's rate-limit counters and
// cpus the machine's CPUs (for the other-load share).
func envoySampleOf(round int, res *loadResult, before, after envoySnap, statPrefix string, cpus int) envoySample {
	s := envoySample{round: round, requests: res.answered(), httpErrors: res.errors, firstErr: res.firstErr, denied: res.over}
	delta := func(name string) int64 { return after.rl[statPrefix+name] - before.rl[statPrefix+name] }
	s.rlErrors = delta("error")
	s.rlCalls = delta("ok") + delta("over_limit") + s.rlErrors
	if s.requests == 0 || res.elapsed <= 0 {
		return s
	}
	n := float64(s.requests)
	per := func(d time.Duration) float64 { return micros(d) / n }
	redis := after.redis.cpu - before.redis.cpu
	s.rps = n / res.elapsed.Seconds()
	s.p50, s.p99 = micros(res.hist.quantile(0.50)), micros(res.hist.quantile(0.99))
	s.envoyCPU = per(after.envoy - before.envoy)
	s.svcCPU = per(after.svc - before.svc)
	s.redisCPU = per(redis)
	s.upCPU = per(after.upstream - before.upstream)
	s.genCPU = per(after.gen - before.gen)
	ours := (after.envoy - before.envoy) + (after.svc - before.svc) + redis + (after.upstream - before.upstream) + (after.gen - before.gen)
	s.other = 100 * max(0, float64(after.busy-before.busy-ours)) / (float64(res.elapsed) * float64(cpus))
	return s
}

// problem says why the interval cannot count, or nil: no request answered,
// HTTP errors above 1%, or, with the filter, failed rate-limit calls above
// 1% (each lets its request through unmetered, which is cheaper) or fewer
// filter calls than requests (the filter did not ask the service; the
// edges of the interval leave a few calls either side).
func (s envoySample) problem(withFilter bool) error {
	if s.quota {
		return s.quotaProblem()
	}
	switch {
	case s.requests == 0:
		return fmt.Errorf("bench: no request answered (%d errors, first: %v)", s.httpErrors, s.firstErr)
	case s.httpErrors*100 > s.requests:
		return fmt.Errorf("bench: %d HTTP errors in %d requests (first: %v)", s.httpErrors, s.requests, s.firstErr)
	case withFilter && s.rlErrors*100 > s.requests:
		return fmt.Errorf("bench: Envoy counted %d failed rate-limit calls in %d requests (service errors or the filter's timeout)", s.rlErrors, s.requests)
	case withFilter && s.rlCalls*10 < s.requests*9:
		return fmt.Errorf("bench: Envoy's rate-limit filter made %d calls for %d requests", s.rlCalls, s.requests)
	}
	return nil
}

// byRound indexes samples by their round.
func byRound(samples []envoySample) map[int]envoySample {
	m := make(map[int]envoySample, len(samples))
	for _, s := range samples {
		m[s.round] = s
	}
	return m
}

// ratio is v / base, NaN when base is not positive (no ratio to take).
func ratio(v, base float64) float64 {
	if base <= 0 || math.IsNaN(v) || math.IsNaN(base) {
		return math.NaN()
	}
	return v / base
}

// pairedRatios returns, for every round with a sample of the floor and of
// both configurations, the figure of rls (envoy-rls, by ShouldRateLimit or
// RLQS) over the reference's; with added, each less the floor's figure of
// the same round (the latency the filter adds). Rounds are in order; a
// round without a ratio is NaN.
func pairedRatios(floor, rls, ref []envoySample, get func(envoySample) float64, added bool, rounds int) []float64 {
	fl, a, b := byRound(floor), byRound(rls), byRound(ref)
	out := make([]float64, rounds)
	for r := range rounds {
		f, okF := fl[r]
		x, okA := a[r]
		y, okB := b[r]
		switch {
		case !okA || !okB || (added && !okF):
			out[r] = math.NaN()
		case added:
			out[r] = ratio(get(x)-get(f), get(y)-get(f))
		default:
			out[r] = ratio(get(x), get(y))
		}
	}
	return out
}

// addedMedian is the median over rounds of a configuration's figure less
// the floor's in the same round; ok is false without such a round.
func addedMedian(floor, cfg []envoySample, get func(envoySample) float64) (float64, bool) {
	fl := byRound(floor)
	var d []float64
	for _, s := range cfg {
		if f, ok := fl[s.round]; ok {
			d = append(d, get(s)-get(f))
		}
	}
	return median(d, func(v float64) float64 { return v }), len(d) > 0
}

// medianRatio is the median of the ratios that are not NaN; ok is false
// when none is.
func medianRatio(rs []float64) (float64, bool) {
	var v []float64
	for _, r := range rs {
		if !math.IsNaN(r) {
			v = append(v, r)
		}
	}
	return median(v, func(x float64) float64 { return x }), len(v) > 0
}

// envoyTarget is one of issue 29's or 31's targets: a ratio of cfg's
// figure (envoy-rls by ShouldRateLimit, or by RLQS) to the reference's
// (less the floor's when added), at most or at least limit.
type envoyTarget struct {
	cfg     envoyConfig
	figure  string
	get     func(envoySample) float64
	added   bool
	limit   float64
	atLeast bool
	closed  bool // only on the closed loop
}

var envoyTargets = []envoyTarget{
	{cfg: cfgRLS, figure: "added p50", get: func(s envoySample) float64 { return s.p50 }, added: true, limit: 0.8},
	{cfg: cfgRLS, figure: "added p99", get: func(s envoySample) float64 { return s.p99 }, added: true, limit: 0.8},
	{cfg: cfgRLS, figure: "Envoy + service + Redis CPU/request", get: envoySample.total, limit: 0.9},
	{cfg: cfgRLS, figure: "requests/s", get: func(s envoySample) float64 { return s.rps }, limit: 1.1, atLeast: true, closed: true},
	// Issue 31: RLQS against the reference's ShouldRateLimit.
	{cfg: cfgQuota, figure: "added p50", get: func(s envoySample) float64 { return s.p50 }, added: true, limit: 0.2},
	{cfg: cfgQuota, figure: "service CPU/request", get: func(s envoySample) float64 { return s.svcCPU }, limit: 0.1},
}

// verdict sets a measured ratio against the target: "met", "missed", or
// "no figure" when no round gave a ratio.
func (t envoyTarget) verdict(r float64, ok bool) string {
	switch {
	case !ok:
		return "no figure"
	case t.atLeast && r >= t.limit, !t.atLeast && r <= t.limit:
		return "met"
	}
	return "missed"
}

// name is the figure, prefixed with its configuration's letter.
func (t envoyTarget) name() string { return envoyConfigTitles[t.cfg][:3] + " " + t.figure }

func (t envoyTarget) bound() string {
	if t.atLeast {
		return fmt.Sprintf("≥ %.1f×", t.limit)
	}
	return fmt.Sprintf("≤ %.1f×", t.limit)
}

// envoyFigures are a cell's medians.
type envoyFigures struct {
	ok                                     bool
	n, failures                            int
	rps, p50, p99                          float64
	envoyCPU, svcCPU, redisCPU, total      float64
	upCPU, genCPU, other, rlCallsPerReq    float64
	httpErrors, rlErrors, denied, requests int64
	// RLQS: usage Envoy reported per request (median), token buckets
	// assigned (summed).
	reportedPerReq float64
	tokenBuckets   int64
}

func envoyFiguresOf(c *envoyCell) envoyFigures {
	if c == nil || len(c.samples) == 0 {
		f := envoyFigures{}
		if c != nil {
			f.failures = len(c.errs)
		}
		return f
	}
	s := c.samples
	m := func(get func(envoySample) float64) float64 { return median(s, get) }
	f := envoyFigures{
		ok: true, n: len(s), failures: len(c.errs),
		rps:      m(func(x envoySample) float64 { return x.rps }),
		p50:      m(func(x envoySample) float64 { return x.p50 }),
		p99:      m(func(x envoySample) float64 { return x.p99 }),
		envoyCPU: m(func(x envoySample) float64 { return x.envoyCPU }),
		svcCPU:   m(func(x envoySample) float64 { return x.svcCPU }),
		redisCPU: m(func(x envoySample) float64 { return x.redisCPU }),
		total:    m(envoySample.total),
		upCPU:    m(func(x envoySample) float64 { return x.upCPU }),
		genCPU:   m(func(x envoySample) float64 { return x.genCPU }),
		other:    m(func(x envoySample) float64 { return x.other }),
		rlCallsPerReq: m(func(x envoySample) float64 {
			return float64(x.rlCalls) / float64(x.requests)
		}),
		reportedPerReq: m(func(x envoySample) float64 {
			return float64(x.reported) / float64(x.requests)
		}),
	}
	for _, x := range s {
		f.httpErrors += x.httpErrors
		f.rlErrors += x.rlErrors
		f.denied += x.denied
		f.requests += x.requests
		f.tokenBuckets += x.tokenBuckets
	}
	return f
}

// writeEnvoy writes the phase's tables: medians per configuration, the
// per-round ratios against the targets, and details.
func writeEnvoy(w io.Writer, o options, cells map[envoyCellKey]*envoyCell) {
	tableHead(w, fmt.Sprintf("Through Envoy, medians of %d rounds (ratio of (b) or (d) to the reference (c) in parentheses; added = less (a) in the same round, median over rounds; (d)'s service CPU is envoy-rls's CPU over the interval / requests)", o.rounds),
		"load", "configuration", "requests/s", "p50 µs", "p99 µs", "added p50 µs", "added p99 µs",
		"Envoy CPU µs/request", "service CPU µs/request", "Redis CPU µs/request", "Envoy + service + Redis CPU µs/request", "HTTP errors", "failed rate-limit calls", "other load")
	slow := false
	for _, load := range cmpLoads(o) {
		samples := func(c envoyConfig) []envoySample {
			if cell := cells[envoyCellKey{load.name, c}]; cell != nil {
				return cell.samples
			}
			return nil
		}
		var ref envoyFigures
		var refAdded [2]float64
		var refAddedOK [2]bool
		for i, c := range envoyTableOrder {
			f := envoyFiguresOf(cells[envoyCellKey{load.name, c}])
			title := ""
			if i == 0 {
				title = load.title
			}
			if !f.ok {
				fmt.Fprintf(w, "| %s | %s | no sample (%d failed) |%s\n", title, envoyConfigTitles[c], f.failures, strings.Repeat(" |", 11))
				continue
			}
			base := envoyFigures{}
			if c == cfgRLS || c == cfgQuota {
				base = ref
			}
			r := func(v, b float64, format string) string {
				if !base.ok {
					return fmt.Sprintf(format, v)
				}
				return withRatio(v, b, format)
			}
			added := [2]string{"—", "—"}
			if c != cfgFloor {
				for k, get := range []func(envoySample) float64{func(s envoySample) float64 { return s.p50 }, func(s envoySample) float64 { return s.p99 }} {
					v, ok := addedMedian(samples(cfgFloor), samples(c), get)
					if !ok {
						continue
					}
					if c == cfgRef {
						refAdded[k], refAddedOK[k] = v, true
					}
					if (c == cfgRLS || c == cfgQuota) && refAddedOK[k] {
						added[k] = withRatio(v, refAdded[k], "%.0f")
					} else {
						added[k] = fmt.Sprintf("%.0f", v)
					}
				}
			}
			svc, redis, rlErr := "—", "—", "—"
			if c != cfgFloor {
				svc, redis, rlErr = r(f.svcCPU, base.svcCPU, "%.2f"), r(f.redisCPU, base.redisCPU, "%.2f"), fmt.Sprint(f.rlErrors)
			}
			if c == cfgQuota {
				rlErr = "— (no call per request)"
			}
			errs := fmt.Sprint(f.httpErrors)
			if f.failures > 0 {
				errs += fmt.Sprintf(" (%d of %d intervals failed)", f.failures, f.failures+f.n)
			}
			rps := r(f.rps, base.rps, "%.0f")
			if rateNotHeld(load.rate, f.rps) {
				rps += " †"
				slow = true
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.0f%% |\n", title, envoyConfigTitles[c],
				rps, r(f.p50, base.p50, "%.0f"), r(f.p99, base.p99, "%.0f"), added[0], added[1],
				r(f.envoyCPU, base.envoyCPU, "%.1f"), svc, redis, r(f.total, base.total, "%.1f"), errs, rlErr, f.other)
			if c == cfgRef {
				ref = f
			}
		}
	}
	fmt.Fprintln(w)
	if slow {
		fmt.Fprintf(w, "† under 95%% of the open loop's rate: every one of the %d callers was waiting for an answer, so the rate fell to what the configuration could answer (a closed loop in effect).\n\n", o.concurrency)
	}
	writeEnvoyTargets(w, o, cells)
	tableHead(w, "Through Envoy, details (medians; counts summed over the rounds)", "load", "configuration", "requests measured",
		"filter calls/request (Envoy's count; (d): requests reported to RLQS in the interval/request, token buckets assigned to its Envoys)", "denied", "upstream CPU µs/request", "driver CPU µs/request (generator)")
	for _, load := range cmpLoads(o) {
		for _, c := range envoyTableOrder {
			f := envoyFiguresOf(cells[envoyCellKey{load.name, c}])
			if !f.ok {
				continue
			}
			calls := "—"
			switch c {
			case cfgFloor:
			case cfgQuota:
				calls = fmt.Sprintf("%.3f reported, %d token buckets", f.reportedPerReq, f.tokenBuckets)
			default:
				calls = fmt.Sprintf("%.3f", f.rlCallsPerReq)
			}
			fmt.Fprintf(w, "| %s | %s | %d | %s | %d | %.1f | %.1f |\n", load.title, envoyConfigTitles[c], f.requests, calls, f.denied, f.upCPU, f.genCPU)
		}
	}
	fmt.Fprintln(w)
}

// envoyTableOrder is the order of the tables' rows: the reference before
// what is set against it.
var envoyTableOrder = []envoyConfig{cfgFloor, cfgRef, cfgRLS, cfgQuota}

// writeEnvoyTargets sets the per-round ratios against issue 29's and 31's targets;
// the verdict is on their median. It reports; it asserts nothing.
func writeEnvoyTargets(w io.Writer, o options, cells map[envoyCellKey]*envoyCell) {
	cols := []string{"load", "figure", "target"}
	for r := range o.rounds {
		cols = append(cols, fmt.Sprintf("round %d", r+1))
	}
	cols = append(cols, "median of the rounds", "")
	under := false
	tableHead(w, "Through Envoy, targets (issue 29: (b) envoy-rls; issue 31: (d) RLQS): ratio to the reference (c) per round (added: less (a) of the same round); reported, not asserted", cols...)
	for _, load := range cmpLoads(o) {
		samples := func(c envoyConfig) []envoySample {
			if cell := cells[envoyCellKey{load.name, c}]; cell != nil {
				return cell.samples
			}
			return nil
		}
		for _, t := range envoyTargets {
			if t.closed && load.rate != 0 {
				continue
			}
			rs := pairedRatios(samples(cfgFloor), samples(t.cfg), samples(cfgRef), t.get, t.added, o.rounds)
			// A round where either service's configuration did not hold
			// the open loop's rate measures saturation, not the moderate
			// load the target is about (issue 42): it is shown, and left
			// out of the median.
			sat := envoySaturatedRounds(load.rate, samples(t.cfg), samples(cfgRef), o.rounds)
			for r := range rs {
				if sat[r] {
					rs[r] = math.NaN()
				}
			}
			m, ok := medianRatio(rs)
			row := []string{load.title, t.name(), t.bound()}
			for r, v := range rs {
				if sat[r] {
					row = append(row, "saturated")
					continue
				}
				row = append(row, fmtRatio(v))
			}
			med := "—"
			if ok {
				med = fmtRatio(m)
			}
			verdict := t.verdict(m, ok)
			// Lagging reports leave work out of the service's CPU, not
			// out of the latency.
			if t.cfg == cfgQuota && !t.added && quotaUnderReported(envoyFiguresOf(cells[envoyCellKey{load.name, cfgQuota}])) {
				verdict += " ‡"
				under = true
			}
			row = append(row, med, verdict)
			fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
		}
	}
	fmt.Fprintln(w)
	if under {
		fmt.Fprintf(w, "‡ (d)'s Envoy reported under %.0f%% of the interval's requests to RLQS (details below): its reports lagged (Envoy saturated), so the service's CPU per request leaves out work it was not yet sent, and the figure flatters RLQS.\n\n", 100*quotaReportedFloor)
	}
}

// quotaReportedFloor is the share of an interval's requests that (d)'s
// Envoy reports to RLQS when it keeps up: --rlqs-duration lands two of its
// 5 s reports, which cover about the interval, so about 1; well under it,
// reports lagged.
const quotaReportedFloor = 0.5

// quotaUnderReported reports whether (d)'s median interval had its usage
// reports lag (see quotaReportedFloor).
func quotaUnderReported(f envoyFigures) bool {
	return f.ok && f.reportedPerReq < quotaReportedFloor
}

// envoySaturatedRounds marks the rounds in which a or b did not hold the open
// loop's rate (none for the closed loop, rate 0).
func envoySaturatedRounds(rate float64, a, b []envoySample, rounds int) []bool {
	out := make([]bool, rounds)
	for _, ss := range [][]envoySample{a, b} {
		for _, s := range ss {
			if s.round >= 0 && s.round < rounds && rateNotHeld(rate, s.rps) {
				out[s.round] = true
			}
		}
	}
	return out
}

// rateNotHeld reports whether an open loop's measured rate fell under 95%
// of its rate (never for the closed loop, rate 0).
func rateNotHeld(rate, measured float64) bool { return rate > 0 && measured < 0.95*rate }

func fmtRatio(r float64) string {
	if math.IsNaN(r) {
		return "—"
	}
	return fmt.Sprintf("%.2f×", r)
}

func envoyMachineLine(o options) string {
	return fmt.Sprintf("Machine: %d CPUs, shared by the driver (load generator), Envoy %s (--concurrency 1), the upstream, the services and their Redis servers; load average at start %s. "+
		"%d interleaved rounds, each %v warmup + %v measured per configuration and load; HTTP/1.1 keep-alive, %d callers (open loop: paced to the rate); "+
		"header %s drawn uniformly from %d users; rule: per-user fixed window of 10⁹/s (never denies). "+
		"(d): rate_limit_quota, one bucket per user (%s), each assigned a token bucket of 10⁹/s; its Envoy is started fresh for each interval (warmup included), and reports usage every 5 s and once per new bucket; its interval is %v measured (--rlqs-duration), and its service CPU per request is envoy-rls's CPU over the interval / requests.",
		numCPU(), envoytest.Version, loadAverage(), o.rounds, o.warmup, o.duration, o.concurrency, userHeader, uniformKeys, rlqsUsersLine(o.rlqsUsers), o.rlqsDuration)
}

// rlqsUsersLine says which users (d) draws from.
func rlqsUsersLine(n int) string {
	if n == 0 {
		return "the same users as (b) and (c)"
	}
	return fmt.Sprintf("--rlqs-users: %d users drawn uniformly", n)
}

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"
)

// server is a running envoy-rls or floor process.
type server struct {
	proc     *child
	grpcAddr string
	httpAddr string
	// debugAddr serves /debug/pprof/trace, for the wake-up measurement
	// (empty: none known).
	debugAddr string
}

// startServer writes the scenario's rules and starts its server, retrying
// on fresh ports when one was taken between allocation and bind.
func (b *bench) startServer(ctx context.Context, name string, floor bool, redis bool, rules string, extra ...string) (*server, error) {
	var rd *redisServer
	if redis {
		if b.redis == nil {
			return nil, errors.New("bench: scenario needs Redis but none was started")
		}
		rd = b.redis
	}
	return b.startServerOn(ctx, name, floor, rd, rules, extra...)
}

// startServerOn is startServer on the given Redis (nil: the in-process
// store), so that the comparison can give each system its own.
func (b *bench) startServerOn(ctx context.Context, name string, floor bool, rd *redisServer, rules string, extra ...string) (*server, error) {
	dir := filepath.Join(b.tmp, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	rulesDir := filepath.Join(dir, "rules")
	if !floor {
		if err := os.MkdirAll(rulesDir, 0o755); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		if err := os.WriteFile(filepath.Join(rulesDir, "bench.yaml"), []byte(rules), 0o644); err != nil {
			return nil, fmt.Errorf("bench: write rules: %w", err)
		}
	}
	for attempt := 0; ; attempt++ {
		gp, err1 := childproc.FreePort()
		hp, err2 := childproc.FreePort()
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		if gp == hp {
			continue
		}
		s := &server{grpcAddr: "127.0.0.1:" + strconv.Itoa(gp), httpAddr: "127.0.0.1:" + strconv.Itoa(hp)}
		var bin string
		var args []string
		if floor {
			bin = b.self
			args = []string{"--floor", "--grpc-addr", s.grpcAddr, "--http-addr", s.httpAddr}
			if rd != nil {
				args = append(args, "--redis-addr", rd.addr)
			}
		} else {
			bin = b.opts.bin
			// No debug listener: replicas on one machine would share its
			// default port.
			args = []string{"serve", "--config-dir", rulesDir, "--grpc-addr", s.grpcAddr, "--http-addr", s.httpAddr, "--debug-addr=", "--log-level", "warn"}
			if rd != nil {
				args = append(args, "--redis-url", "redis://"+rd.addr)
			}
			args = append(append(args, b.opts.rlsArgs...), extra...)
		}
		var env []string // nil: the driver's environment
		if !floor {
			env = b.opts.rlsEnv
		}
		p, err := startChildEnv(name, dir, env, bin, args...)
		if err != nil {
			return nil, err
		}
		b.track(p)
		s.proc = p
		err = waitHTTPReady(ctx, p, "http://"+s.httpAddr+"/readyz", 30*time.Second)
		if err == nil {
			return s, nil
		}
		p.stop()
		if !bindFailed(p) || attempt == 3 {
			return nil, err
		}
	}
}

// snapshot is the counters read at one edge of a measured interval.
type snapshot struct {
	srvCPU time.Duration
	genCPU time.Duration
	busy   time.Duration // whole machine
	redis  redisStats
	batch  metricSums
}

// snap reads the server's and the generator's CPU time, and Redis INFO and
// the server's batch metrics when the scenario uses Redis.
// The /metrics scrape costs the server CPU, so it happens outside the
// measured interval: before the CPU read at the start, after it at the end.
func (b *bench) snap(ctx context.Context, s *server, withRedis, start bool) (snapshot, error) {
	var rd *redisServer
	if withRedis {
		rd = b.redis
	}
	return snapOn(ctx, s, rd, start)
}

// snapOn is snap with the server's own Redis (nil: none).
func snapOn(ctx context.Context, s *server, rd *redisServer, start bool) (snapshot, error) {
	var sn snapshot
	withRedis := rd != nil
	var err error
	scrape := func() {
		if withRedis {
			// Batch metrics are informative; their absence is no error.
			sn.batch, _ = scrapeBatch(ctx, "http://"+s.httpAddr+"/metrics")
		}
	}
	if start {
		scrape()
	}
	if sn.srvCPU, err = procCPU(s.proc.pid()); err != nil {
		return sn, err
	}
	if sn.genCPU, err = procCPU(os.Getpid()); err != nil {
		return sn, err
	}
	if sn.busy, err = machineBusy(); err != nil {
		return sn, err
	}
	if withRedis {
		if sn.redis, err = rd.stats(ctx); err != nil {
			return sn, err
		}
	}
	if !start {
		scrape()
	}
	return sn, nil
}

// runScenario starts the scenario's server, primes it, measures one load
// run and stops the server.
func (b *bench) runScenario(ctx context.Context, sc scenario, rate float64) (*row, error) {
	if sc.redis {
		if err := b.redis.flush(ctx); err != nil {
			return nil, err
		}
	}
	s, err := b.startServer(ctx, sc.name, sc.floor, sc.redis, sc.rules, sc.args...)
	if err != nil {
		return nil, err
	}
	defer s.proc.stop()
	base := loadConfig{
		target:      s.grpcAddr,
		concurrency: b.opts.concurrency,
		perConn:     b.opts.perConn,
	}
	if sc.prime != nil {
		pc := base
		pc.duration = time.Minute
		pc.maxRequests = int64(len(b.users))
		res, err := runLoad(ctx, pc, sc.prime(b.users))
		if err != nil {
			return nil, fmt.Errorf("prime: %w", err)
		}
		if res.errors > 0 {
			return nil, fmt.Errorf("prime: %d errors, first: %w", res.errors, res.firstErr)
		}
	}
	cfg := base
	cfg.warmup = b.opts.warmup
	cfg.duration = b.opts.duration
	cfg.maxRequests = b.opts.maxRequests
	cfg.rate = rate
	if sc.rate > 0 {
		cfg.rate = sc.rate
	}
	before, after, snapErr := snapEdges(&cfg, func(start bool) (snapshot, error) { return b.snap(ctx, s, sc.redis, start) })
	res, err := runLoad(ctx, cfg, sc.workload(b.users))
	if err != nil {
		return nil, err
	}
	if err := snapErr(); err != nil {
		return nil, err
	}
	if s.proc.exited() {
		return nil, fmt.Errorf("bench: %s exited during the run:\n%s", sc.name, s.proc.logTail())
	}
	r := newRow(sc, res, *before, *after)
	if res.answered() == 0 {
		return r, fmt.Errorf("bench: no call answered (%d errors, first: %v)", res.errors, res.firstErr)
	}
	b.logf("  %s: %.0f decisions/s, p50 %v, server %.1f µs/decision, %d errors",
		sc.name, r.rps, r.p50, r.srvCPU, r.errors)
	return r, nil
}

// metricSums maps a histogram name to its summed _sum and _count series.
type metricSums map[string][2]float64

// scrapeBatch reads the server's /metrics and keeps every histogram or
// summary whose name mentions "batch", so the report can show the mean
// batch size without depending on the exact metric name.
func scrapeBatch(ctx context.Context, url string) (metricSums, error) {
	out := metricSums{}
	err := fetchMetrics(ctx, url, func(series, value string) error {
		name := series
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name = name[:i]
		}
		if !strings.Contains(name, "batch") {
			return nil
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return nil
		}
		if base, ok := strings.CutSuffix(name, "_sum"); ok {
			e := out[base]
			e[0] += v
			out[base] = e
		} else if base, ok := strings.CutSuffix(name, "_count"); ok {
			e := out[base]
			e[1] += v
			out[base] = e
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// fetchMetrics GETs a Prometheus text endpoint and calls each for every
// sample line (eachSample).
func fetchMetrics(ctx context.Context, url string, each func(series, value string) error) error {
	return get(ctx, url, 2*time.Second, func(r io.Reader) error { return eachSample(r, each) })
}

// get GETs url within timeout and hands the body of a 200 to read.
func get(ctx context.Context, url string, timeout time.Duration, read func(io.Reader) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("bench: GET %s: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("bench: GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("bench: GET %s: %s", url, resp.Status)
	}
	if err := read(resp.Body); err != nil {
		return fmt.Errorf("bench: GET %s: %w", url, err)
	}
	return nil
}

// eachSample calls each with the series (name and labels) and the value
// of every sample line of Prometheus text, skipping comments; it stops at
// each's first error.
func eachSample(r io.Reader, each func(series, value string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		if err := each(line[:sp], line[sp+1:]); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("bench: metrics: %w", err)
	}
	return nil
}

// meanBatch returns the mean observation of the batch-size histogram
// between two scrapes, preferring a name that says "size"; ok is false when
// the server exports none or none was observed.
func meanBatch(before, after metricSums) (name string, mean float64, ok bool) {
	names := make([]string, 0, len(after))
	for n := range after {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		si, sj := strings.Contains(names[i], "size"), strings.Contains(names[j], "size")
		if si != sj {
			return si
		}
		return names[i] < names[j]
	})
	for _, n := range names {
		dc := after[n][1] - before[n][1]
		if dc > 0 {
			return n, (after[n][0] - before[n][0]) / dc, true
		}
	}
	return "", 0, false
}

func numCPU() int { return runtime.NumCPU() }

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"
)

// The wake-up measurement (--wakeups, issue 42) counts what a decision
// costs the service in the kernel's and the Go scheduler's terms, for the
// floor, the floor with one Redis command per call, the reference and
// envoy-rls side by side (the comparison's systems, each on its own
// Redis, rounds interleaved): syscalls by kind,
// context switches, goroutines woken and created, beside the service's CPU.
// These are counts, far steadier on a shared machine than times.
//
// Each cell is one load run with three windows in a row, so that no tool
// disturbs the figures of another:
//
//  1. CPU: no tracer; the service's CPU time and its context switches
//     (voluntary and involuntary, summed over /proc/PID/task/*/status);
//     the rate the service held, which marks a saturated row;
//  2. trace: a one-second Go execution trace from the service's
//     /debug/pprof/trace, whose goroutine state transitions
//     (Waiting->Runnable: woken; NotExist->Runnable: created) are counted
//     with `go tool trace -d=parsed` after the load;
//  3. strace: `strace -c -f -p PID`, syscalls by kind; ptrace stops the
//     service twice per syscall, so this window's rate (reported) is below
//     the others' and its CPU is not measured.
//
// Decisions in each window are the load's answered calls between the
// window's edges.

// wakeTraceWindow is the execution trace's length: long enough for a few
// thousand decisions at 4000/s, short enough to parse in a second.
const wakeTraceWindow = time.Second

// wakeSample is one system's figures on one load in one round; all "per"
// figures are per decision.
type wakeSample struct {
	round            int
	offered          float64 // calls/s offered, 0 in the closed loop
	rps              float64 // decisions/s held in the CPU window
	cpu              float64 // service µs of CPU per decision
	vcs, ivcs        float64 // voluntary and involuntary context switches
	woken, created   float64 // goroutines unblocked and created (trace)
	traceDecisions   int64
	syscalls         map[string]float64
	sysErrors        map[string]float64 // the calls that failed (EAGAIN mostly)
	sysTotal         float64
	straceRPS        float64
	straceDecisions  int64
	traceErr, sysErr error // a window that failed leaves its figures out
}

// saturated reports whether the service did not hold the offered rate in
// the CPU window: the row then measures saturation, not moderate load.
func (s wakeSample) saturated() bool { return s.offered > 0 && s.rps < 0.95*s.offered }

// wakeCellKey indexes the wake-up cells: one per load and system.
type wakeCellKey struct {
	load string
	sys  cmpSystem
}

// runWakeups is the --wakeups run: the three systems with their debug
// listeners, opts.rounds interleaved rounds over the loads (uniform keys),
// then the tables.
func runWakeups(ctx context.Context, opts options, stdout, stderr io.Writer) (map[wakeCellKey]*cell[wakeSample], error) {
	strace, err := findStrace()
	if err != nil {
		return nil, err
	}
	// envoy-rls's debug listener serves /debug/pprof/trace with --pprof;
	// the driver turns it off by default, so it is turned on here, on a
	// port of its own (the flags after the driver's own win).
	port, err := childproc.FreePort()
	if err != nil {
		return nil, err
	}
	rlsDebug := "127.0.0.1:" + strconv.Itoa(port)
	opts.rlsArgs = append(opts.rlsArgs[:len(opts.rlsArgs):len(opts.rlsArgs)], "--debug-addr="+rlsDebug, "--pprof")
	b, err := newBench(opts, stderr)
	if err != nil {
		return nil, err
	}
	defer b.close()
	targets, err := b.startSystems(ctx, true)
	if err != nil {
		return nil, err
	}
	targets[sysRLS].srv.debugAddr = rlsDebug
	targets[sysFloor].srv.debugAddr = targets[sysFloor].srv.httpAddr
	// The second floor: the no-work server plus one go-redis command per
	// call, on a Redis of its own.
	fr, err := b.startFloorRedis(ctx)
	if err != nil {
		return nil, err
	}
	targets[sysFloorRedis] = fr
	fmt.Fprintf(stdout, "## Wake-ups per decision: envoy-rls beside envoyproxy/ratelimit, %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(stdout, "%s\n\n", wakeMachineLine(opts))
	cells := map[wakeCellKey]*cell[wakeSample]{}
	keys := cmpKeySets(options{})[0] // uniform, 100 k users
	for round := range opts.rounds {
		b.logf("wake-ups: round %d of %d", round+1, opts.rounds)
		order := []cmpSystem{sysFloor, sysFloorRedis, sysRef, sysRLS}
		if round%2 == 1 {
			order = []cmpSystem{sysFloor, sysFloorRedis, sysRLS, sysRef}
		}
		for _, load := range cmpLoads(opts) {
			for _, sys := range order {
				name := fmt.Sprintf("wake-ups %s/%s", load.name, systemTitles[sys])
				err := measureInto(ctx, b, cells, wakeCellKey{load.name, sys}, name,
					func() (wakeSample, error) { return b.measureWake(ctx, strace, round, targets[sys], load, keys) },
					describeWake)
				if err != nil {
					return cells, err
				}
			}
		}
	}
	writeWakeups(stdout, opts, cells)
	if errs := cellErrors(cells); len(errs) > 0 {
		return cells, fmt.Errorf("bench: wake-ups: %d interval(s) failed: %w", len(errs), errors.Join(errs...))
	}
	return cells, nil
}

// startFloorRedis starts the floor that sends one Redis command per call,
// on a redis-server of its own, with its execution trace on its HTTP
// listener.
func (b *bench) startFloorRedis(ctx context.Context) (cmpTarget, error) {
	t, err := b.startOnOwnRedis(ctx, "cmp-floor-redis", true, "")
	if err != nil {
		return t, err
	}
	t.srv.debugAddr = t.srv.httpAddr
	return t, nil
}

func describeWake(s wakeSample) string {
	return fmt.Sprintf("%.0f/s, %.1f µs CPU, %.2f+%.2f switches, %.2f woken, %.2f syscalls (%.0f/s under strace) per decision",
		s.rps, s.cpu, s.vcs, s.ivcs, s.woken, s.sysTotal, s.straceRPS)
}

func wakeMachineLine(o options) string {
	return fmt.Sprintf("%s Wake-ups: %d interleaved rounds, uniform 100 k keys; per system and load one run of %v warmup, then a %v CPU window (no tracer), "+
		"a %v execution trace, a %v strace -c -f window.", machineLine(o), o.rounds, o.warmup, o.duration, wakeTraceWindow, o.straceWindow)
}

// findStrace returns strace's path, or an error saying how to install it.
func findStrace() (string, error) {
	for _, p := range []string{"strace", "/usr/bin/strace"} {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
		if p, err := lookPath(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("bench: --wakeups needs strace (apt-get install -y strace; make test-deps installs it)")
}

// measureWake runs one load on t and measures its three windows.
func (b *bench) measureWake(ctx context.Context, strace string, round int, t cmpTarget, load cmpLoad, keys cmpKeys) (wakeSample, error) {
	s := wakeSample{round: round, offered: load.rate}
	if t.rd != nil {
		if err := t.rd.flush(ctx); err != nil {
			return s, err
		}
	}
	if t.srv.debugAddr == "" {
		return s, errors.New("bench: wake-ups: the server has no debug address for its execution trace")
	}
	progress := new(atomic.Int64)
	started := make(chan struct{})
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cfg := loadConfig{
		target: t.srv.grpcAddr, concurrency: b.opts.concurrency, perConn: b.opts.perConn,
		warmup: b.opts.warmup, rate: load.rate, maxRequests: b.opts.maxRequests, progress: progress,
		// Longer than the windows need: the load is cancelled once they
		// are done; this only bounds a stuck window.
		duration: b.opts.duration + wakeTraceWindow + b.opts.straceWindow + 30*time.Second,
		onStart:  func() { close(started) },
	}
	type loadDone struct {
		res *loadResult
		err error
	}
	done := make(chan loadDone, 1)
	go func() {
		res, err := runLoad(lctx, cfg, oneEntry(cmpDomain, "user", keys.newValue))
		done <- loadDone{res, err}
	}()
	select {
	case <-started:
	case d := <-done:
		return s, fmt.Errorf("bench: wake-ups: load ended in its warmup: %w", d.err)
	}
	pid := t.srv.proc.pid()
	tracePath := filepath.Join(b.tmp, fmt.Sprintf("wake-%d.trace", pid))
	windowErr := b.wakeWindows(ctx, strace, pid, t.srv.debugAddr, tracePath, progress, &s)
	cancel()
	d := <-done
	if windowErr != nil {
		return s, windowErr
	}
	if d.err != nil && !errors.Is(d.err, context.Canceled) {
		return s, d.err
	}
	if d.err == nil && d.res.errors*100 > max(d.res.answered(), 1) {
		return s, fmt.Errorf("bench: wake-ups: %d answered, %d errors (first: %v)", d.res.answered(), d.res.errors, d.res.firstErr)
	}
	if t.srv.proc.exited() {
		return s, fmt.Errorf("bench: server exited during the run:\n%s", t.srv.proc.logTail())
	}
	if s.traceErr == nil {
		var woken, created int64
		woken, created, s.traceErr = countTraceWakeups(ctx, tracePath)
		if s.traceErr == nil && s.traceDecisions > 0 {
			s.woken = float64(woken) / float64(s.traceDecisions)
			s.created = float64(created) / float64(s.traceDecisions)
		}
	}
	if dir := b.opts.keepTraces; dir != "" && s.traceErr == nil {
		// Kept for go tool trace: which goroutines wake, woken by whom.
		if err := os.Rename(tracePath, filepath.Join(dir, fmt.Sprintf("%s-%s-r%d.trace", load.name, t.srv.proc.name, round+1))); err != nil {
			b.logf("  keep trace: %v", err)
		}
	}
	os.Remove(tracePath)
	if s.traceErr != nil {
		b.logf("  trace window failed: %v", s.traceErr)
	}
	if s.sysErr != nil {
		b.logf("  strace window failed: %v", s.sysErr)
	}
	return s, nil
}

// wakeWindows measures the CPU, trace and strace windows in turn into s.
// The trace's and strace's failures are kept in s; a failed CPU window
// is the error.
func (b *bench) wakeWindows(ctx context.Context, strace string, pid int, debugAddr, tracePath string, progress *atomic.Int64, s *wakeSample) error {
	// 1. CPU and context switches, no tracer.
	cpu0, err := procCPU(pid)
	if err != nil {
		return err
	}
	cs0, err := procSwitches(pid)
	if err != nil {
		return err
	}
	n0, t0 := progress.Load(), time.Now()
	if err := sleepCtx(ctx, b.opts.duration); err != nil {
		return err
	}
	cpu1, err := procCPU(pid)
	if err != nil {
		return err
	}
	cs1, err := procSwitches(pid)
	if err != nil {
		return err
	}
	n1, t1 := progress.Load(), time.Now()
	n := n1 - n0
	if n <= 0 {
		return errors.New("bench: wake-ups: no decision in the CPU window")
	}
	s.rps = float64(n) / t1.Sub(t0).Seconds()
	s.cpu = float64(cpu1-cpu0) / float64(time.Microsecond) / float64(n)
	s.vcs = float64(cs1.voluntary-cs0.voluntary) / float64(n)
	s.ivcs = float64(cs1.involuntary-cs0.involuntary) / float64(n)

	// 2. One second of execution trace.
	n0 = progress.Load()
	s.traceErr = fetchTrace(ctx, "http://"+debugAddr+"/debug/pprof/trace?seconds="+strconv.Itoa(int(wakeTraceWindow/time.Second)), tracePath)
	s.traceDecisions = progress.Load() - n0

	// 3. Syscalls by kind under strace.
	var sys map[string]straceCount
	sys, s.straceDecisions, s.straceRPS, s.sysErr = straceWindow(ctx, strace, pid, b.opts.straceWindow, progress, b.tmp)
	if s.sysErr == nil && s.straceDecisions > 0 {
		s.syscalls, s.sysErrors = map[string]float64{}, map[string]float64{}
		for name, c := range sys {
			v := float64(c.calls) / float64(s.straceDecisions)
			s.syscalls[name] = v
			s.sysErrors[name] = float64(c.errors) / float64(s.straceDecisions)
			s.sysTotal += v
		}
	} else if s.sysErr == nil {
		s.sysErr = errors.New("no decision under strace")
	}
	return nil
}

// sleepCtx sleeps d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// fetchTrace saves the execution trace url serves into path.
func fetchTrace(ctx context.Context, url, path string) error {
	return get(ctx, url, wakeTraceWindow+10*time.Second, func(r io.Reader) error {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, r); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	})
}

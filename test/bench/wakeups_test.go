package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"runtime/trace"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseStraceSummary(t *testing.T) {
	const out = `% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 41.10    0.012000           3      4000      2000 read
 30.00    0.009000           2      3500           write
  0.00    0.000000           0        12           epoll_pwait
------ ----------- ----------- --------- --------- ----------------
100.00    0.021000           2      7512      2000 total
`
	got, err := parseStraceSummary(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]straceCount{"read": {4000, 2000}, "write": {3500, 0}, "epoll_pwait": {12, 0}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %+v, want %+v", k, got[k], v)
		}
	}
	if _, err := parseStraceSummary(strings.NewReader("strace: attach: ptrace(PTRACE_SEIZE, 1): Operation not permitted\n")); err == nil {
		t.Error("a summary without its table parsed")
	}
}

func TestParseSwitches(t *testing.T) {
	v, iv := parseSwitches("Name:\tx\nvoluntary_ctxt_switches:\t17\nnonvoluntary_ctxt_switches:\t4\n")
	if v != 17 || iv != 4 {
		t.Fatalf("got %d, %d; want 17, 4", v, iv)
	}
	sw, err := procSwitches(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if sw.voluntary+sw.involuntary == 0 {
		t.Fatal("a running test process has never been switched out")
	}
}

// TestCountTraceWakeups traces a known number of channel hand-offs to a
// goroutine that blocks on each, and checks the count sees at least that
// many wake-ups and the one creation.
func TestCountTraceWakeups(t *testing.T) {
	// The bench parses traces with `go tool trace`, so the go command
	// that runs this test must be there; a trace already running (go test
	// -trace) would leave the count unchecked, so it fails too.
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("no go command to parse the trace: %v", err)
	}
	const handoffs = 50
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Fatalf("starting a trace (run this test without go test -trace): %v", err)
	}
	ping, pong := make(chan int), make(chan int)
	go func() {
		for v := range ping {
			pong <- v
		}
		close(pong)
	}()
	for i := range handoffs {
		ping <- i
		<-pong
	}
	close(ping)
	<-pong
	trace.Stop()
	path := t.TempDir() + "/t.trace"
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	woken, created, err := countTraceWakeups(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	// Each hand-off wakes the peer that waits for it: at least one
	// wake-up per hand-off, the rest being the runtime's own goroutines.
	if woken < handoffs || created < 1 {
		t.Fatalf("woken %d, created %d; want at least %d and 1", woken, created, handoffs)
	}
}

func TestWakeRatioLeavesSaturatedRoundsOut(t *testing.T) {
	cpu := wakeFigures()[0]
	rls := &cell[wakeSample]{samples: []wakeSample{
		{round: 0, offered: 4000, rps: 4000, cpu: 50},
		{round: 1, offered: 4000, rps: 3000, cpu: 10}, // saturated
	}}
	ref := &cell[wakeSample]{samples: []wakeSample{
		{round: 0, offered: 4000, rps: 4000, cpu: 100},
		{round: 1, offered: 4000, rps: 4000, cpu: 100},
	}}
	if r, n := wakeRatio(rls, ref, cpu, true); r != 0.5 || n != 1 {
		t.Fatalf("moderate: got %v over %d rounds, want 0.5 over 1", r, n)
	}
	if r, n := wakeRatio(rls, ref, cpu, false); r != 0.3 || n != 2 {
		t.Fatalf("all: got %v over %d rounds, want 0.3 over 2", r, n)
	}
	// A strace window that failed leaves its figures out, not zero.
	sys := wakeFigures()[6]
	rls.samples[0].sysErr = errors.New("detached")
	if _, n := wakeRatio(rls, ref, sys, false); n != 0 {
		t.Fatalf("a failed window counted: %d rounds", n)
	}
}

func TestParseWakeupsOptions(t *testing.T) {
	o, err := parseOptions([]string{"--wakeups", "--rls-env", "GOMAXPROCS=1 GODEBUG=x=1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !o.wakeups || o.duration != 3*time.Second || o.warmup != time.Second || len(o.rlsEnv) != 2 {
		t.Fatalf("got wakeups %v, duration %v, warmup %v, env %q", o.wakeups, o.duration, o.warmup, o.rlsEnv)
	}
	for _, args := range [][]string{
		{"--wakeups", "--compare"},
		{"--wakeups", "--rls-env", "GOMAXPROCS"},
		{"--wakeups", "--strace-window", "0s"},
	} {
		if _, err := parseOptions(args, io.Discard); err == nil {
			t.Errorf("%q parsed", args)
		}
	}
}

// TestEnvoySaturatedRounds: a round where either configuration fell under
// 95% of the open loop's rate is marked; the closed loop never is.
func TestEnvoySaturatedRounds(t *testing.T) {
	a := []envoySample{{round: 0, rps: 1000}, {round: 1, rps: 900}, {round: 2, rps: 1000}}
	b := []envoySample{{round: 0, rps: 1000}, {round: 1, rps: 1000}, {round: 2, rps: 940}}
	got := envoySaturatedRounds(1000, a, b, 3)
	if want := []bool{false, true, true}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if got := envoySaturatedRounds(0, a, b, 3); slices.Contains(got, true) {
		t.Fatalf("closed loop marked saturated: %v", got)
	}
}

// TestWriteWakeups: the table marks a service that did not hold the
// offered rate, shows syscalls by kind with their failures, and the
// targets leave the saturated round out (here the only one at 4000/s) and
// set the floor with one Redis command beside them.
func TestWriteWakeups(t *testing.T) {
	o := options{rounds: 1, concurrency: 32, cmpOnly: []string{"1000", "4000"}}
	sample := func(offered, rps, cpu float64) wakeSample {
		return wakeSample{offered: offered, rps: rps, cpu: cpu, vcs: 4, ivcs: 1, woken: 3, created: 0.1,
			traceDecisions: 1000, straceDecisions: 1000, sysTotal: 3,
			syscalls: map[string]float64{"read": 2, "write": 1}, sysErrors: map[string]float64{"read": 1, "write": 0}}
	}
	cells := map[wakeCellKey]*cell[wakeSample]{
		{"1000", sysFloor}:      {samples: []wakeSample{sample(1000, 1000, 50)}},
		{"1000", sysFloorRedis}: {samples: []wakeSample{sample(1000, 1000, 80)}},
		{"1000", sysRef}:        {samples: []wakeSample{sample(1000, 1000, 200)}},
		{"1000", sysRLS}:        {samples: []wakeSample{sample(1000, 1000, 100)}},
		{"4000", sysRef}:        {samples: []wakeSample{sample(4000, 4000, 100)}},
		{"4000", sysRLS}:        {samples: []wakeSample{sample(4000, 3000, 50)}},
	}
	var buf bytes.Buffer
	writeWakeups(&buf, o, cells)
	out := buf.String()
	for _, want := range []string{
		"| 100.0 (0.50×) |",                   // envoy-rls's CPU and its ratio
		"read 2.00 (1.00 failed), write 1.00", // syscalls by kind
		"3000 **saturated in 1 of 1 rounds**",
		"| floor + one Redis command | 1000 | 80.0 (0.40×) |",
		"| open loop 1000/s | service CPU µs | ≤ 0.6× | 0.50× | 1 | met | 0.40× (1) | 1.25× (1) |",
		"| open loop 1000/s | context switches (voluntary + involuntary) | ≤ 0.5× | 1.00× | 1 | not met | 1.00× (1) | 1.00× (1) |",
		"| open loop 4000/s | service CPU µs | ≤ 0.5× | — | 0 | no moderate-load round (saturated or failed) | — | — |",
		"| open loop 4000/s | floor (no-work gRPC) | no sample (0 failed) |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary serve as the floor, as the driver binary
// does: the driver re-executes os.Executable() with --floor.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "--floor" {
		os.Exit(floorMain(os.Args[2:], os.Stderr))
	}
	os.Exit(m.Run())
}

func TestHistogramQuantiles(t *testing.T) {
	tests := []struct {
		name    string
		samples []time.Duration
		q       float64
		want    time.Duration
	}{
		{name: "exact small", samples: []time.Duration{5, 7, 9}, q: 0.5, want: 7},
		{name: "single", samples: []time.Duration{250 * time.Microsecond}, q: 0.99, want: 250 * time.Microsecond},
		{name: "p99 of 100", samples: seq(100, time.Millisecond), q: 0.99, want: 99 * time.Millisecond},
		{name: "p50 of 100", samples: seq(100, time.Millisecond), q: 0.50, want: 50 * time.Millisecond},
		{name: "huge clamps", samples: []time.Duration{time.Hour}, q: 0.5, want: time.Duration(histValue(histBuckets - 1))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h histogram
			for _, s := range tt.samples {
				h.record(s)
			}
			got := h.quantile(tt.q)
			if diff := float64(got-tt.want) / float64(tt.want); diff > 0.01 || diff < -0.01 {
				t.Fatalf("quantile(%v) = %v, want %v within 1%%", tt.q, got, tt.want)
			}
		})
	}
}

func seq(n int, unit time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(i+1) * unit
	}
	return out
}

func TestHistogramIndexRoundTrip(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 255, 256, 1000, 123456, 1 << 30, 1<<40 - 1} {
		i := histIndex(v)
		got := histValue(i)
		if d := float64(got) - float64(v); d > float64(v)/128+1 || d < -float64(v)/128-1 {
			t.Errorf("histValue(histIndex(%d)) = %d, more than 1/128 away", v, got)
		}
	}
}

func TestParseRedisInfo(t *testing.T) {
	text := "# Stats\r\ntotal_commands_processed:120\r\ntotal_reads_processed:30\r\ntotal_net_input_bytes:4000\r\ntotal_net_output_bytes:2500\r\n# CPU\r\n" +
		"used_cpu_sys:1.500000\r\nused_cpu_user:0.250000\r\n# Commandstats\r\n" +
		"cmdstat_evalsha:calls=100,usec=900,usec_per_call=9.00,rejected_calls=0,failed_calls=0\r\n"
	got, err := parseRedisInfo(text)
	if err != nil {
		t.Fatal(err)
	}
	want := redisStats{cpu: 1750 * time.Millisecond, commands: 120, reads: 30, netIn: 4000, netOut: 2500, evalsha: 100, calls: map[string]int64{"evalsha": 100}, usec: map[string]int64{"evalsha": 900}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parseRedisInfo = %+v, want %+v", got, want)
	}
	if _, err := parseRedisInfo("# Stats\r\n"); err == nil {
		t.Fatal("parseRedisInfo accepted INFO without cpu fields")
	}
}

func TestProcReaders(t *testing.T) {
	// Burn a little CPU so that at least one clock tick is charged.
	deadline := time.Now().Add(50 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = x * x
	}
	cpu, err := procCPU(os.Getpid())
	if err != nil || cpu <= 0 {
		t.Fatalf("procCPU(self) = %v, %v; want > 0", cpu, err)
	}
	rss, hwm, err := procMem(os.Getpid())
	if err != nil || rss <= 0 || hwm < rss {
		t.Fatalf("procMem(self) = %d, %d, %v; want 0 < rss <= hwm", rss, hwm, err)
	}
	if busy, err := machineBusy(); err != nil || busy <= 0 {
		t.Fatalf("machineBusy() = %v, %v; want > 0", busy, err)
	}
}

// smokeOptions keep every phase tiny and capped: the smoke test proves the
// driver works end to end, it measures nothing.
func smokeOptions(bin string, scenarios ...string) options {
	return options{
		bin:            bin,
		duration:       20 * time.Second, // a bound only; the request cap ends each run
		warmup:         100 * time.Millisecond,
		concurrency:    4,
		perConn:        2,
		maxRequests:    3000,
		users:          100,
		keys:           2000,
		keysPerRequest: 10,
		soak:           time.Second,
		soakEvery:      250 * time.Millisecond,
		scenarios:      scenarios,
		timeout:        3 * time.Minute,
		// A generous Redis timeout: under -race on a loaded machine the
		// 100ms default can expire, and a smoke test must only fail for a
		// real error, not for a slow machine.
		rlsArgs: []string{"--redis-timeout", "10s"},
	}
}

func runSmoke(t *testing.T, opts options) *results {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opts.timeout)
	defer cancel()
	var out, log bytes.Buffer
	res, err := run(ctx, opts, &out, &log)
	if err != nil {
		t.Fatalf("run: %v\nreport:\n%s\nlog:\n%s", err, out.String(), log.String())
	}
	if !strings.Contains(out.String(), "| floor (no-work gRPC server) |") {
		t.Errorf("report has no floor row:\n%s", out.String())
	}
	return res
}

func checkRow(t *testing.T, r *row) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("%s: %v", r.name, r.err)
	}
	if r.decisions <= 0 || r.rps <= 0 || r.p50 <= 0 || r.p99 < r.p50 {
		t.Errorf("%s: decisions=%d rps=%v p50=%v p99=%v; want answered calls and ordered latencies", r.name, r.decisions, r.rps, r.p50, r.p99)
	}
	if r.srvCPU <= 0 || r.genCPU <= 0 {
		t.Errorf("%s: server CPU %v, generator CPU %v µs/decision; want > 0", r.name, r.srvCPU, r.genCPU)
	}
	if r.errors != 0 {
		t.Errorf("%s: %d RPC errors", r.name, r.errors)
	}
	if r.redis && (r.redisCPU <= 0 || r.redisCmds <= 0 || r.redisReads <= 0) {
		t.Errorf("%s: Redis CPU %v µs, %v commands, %v reads per decision; want > 0", r.name, r.redisCPU, r.redisCmds, r.redisReads)
	}
}

// TestSmokeFloor runs the floor scenario alone: this test binary serves as
// the floor process, the generator drives it, /proc is read.
func TestSmokeFloor(t *testing.T) {
	res := runSmoke(t, smokeOptions("", "floor"))
	if len(res.rows) != 1 {
		t.Fatalf("got %d rows, want 1", len(res.rows))
	}
	checkRow(t, res.rows[0])
}

// TestSmokeEnvoyRLS builds envoy-rls (or uses BENCH_RLS_BIN) and runs
// every phase briefly against it and a real redis-server.
func TestSmokeEnvoyRLS(t *testing.T) {
	bin := os.Getenv("BENCH_RLS_BIN")
	if bin == "" {
		bin = buildRLS(t)
	}
	res := runSmoke(t, smokeOptions(bin, allScenarioNames()...))
	if want := len(loadScenarios()) + 1; len(res.rows) != want { // + floor again
		t.Fatalf("got %d rows, want %d", len(res.rows), want)
	}
	for _, r := range res.rows {
		checkRow(t, r)
		if r.name == "redis-90-over" && r.denied < 0.5 {
			t.Errorf("redis-90-over: %.0f%% denied, want most calls denied", 100*r.denied)
		}
		if r.name != "redis-90-over" && r.bound == 0 && r.denied != 0 {
			t.Errorf("%s: %.0f%% denied, want none", r.name, 100*r.denied)
		}
		if r.bound > 0 && float64(r.admitted) > r.bound {
			t.Errorf("%s: admitted %d, above the bound %.0f", r.name, r.admitted, r.bound)
		}
	}
	if m := res.mem; m == nil || m.keys != 2000 || m.rss <= 0 || m.baseRSS <= 0 {
		t.Errorf("memory check = %+v, want 2000 keys and positive RSS", m)
	}
	if s := res.soak; s == nil || len(s.samples) < 2 || s.load.answered() <= 0 {
		t.Errorf("soak = %+v, want samples and answered calls", s)
	} else {
		for _, p := range s.samples {
			if p.rss <= 0 {
				t.Errorf("soak sample %+v: RSS not positive", p)
			}
		}
	}
}

// TestSmokeScriptCost runs --script-cost briefly against a real
// redis-server: every call kind is measured at both loads, with Redis CPU
// and the commands it ran.
func TestSmokeScriptCost(t *testing.T) {
	opts := smokeOptions("")
	ctx, cancel := context.WithTimeout(context.Background(), opts.timeout)
	defer cancel()
	var out, log strings.Builder
	if err := runScriptCost(ctx, opts, &out, &log); err != nil {
		t.Fatalf("script cost: %v\n%s", err, log.String())
	}
	table := out.String()
	for _, want := range []string{"| PING (a round trip, no work) | 1000/s | 100 |", "| EVALSHA apply.lua, one fixed window | closed, 8 callers | 3000 |", "evalsha", "incrby", "pexpire", "hincrby", "| HINCRBY into ~100-field listpack hashes (envoy-rls's plain call) | 1000/s | 100 |"} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}
}

func buildRLS(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go not on PATH (set BENCH_RLS_BIN to a built envoy-rls instead): %v", err)
	}
	bin := filepath.Join(t.TempDir(), "envoy-rls")
	// The flags of `make build`, so the two share the build cache.
	cmd := exec.Command(goBin, "build", "-trimpath", "-o", bin, "github.com/envoy-rls/envoy-rls/cmd/envoy-rls")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build envoy-rls: %v\n%s", err, out)
	}
	return bin
}

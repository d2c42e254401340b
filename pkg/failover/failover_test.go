package failover

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/envoy-rls/envoy-rls/internal/testkit/eventually"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

var errRefused = &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}

// fake is a hand-written primary: it fails with err when set, blocks on
// gate (or until ctx ends) when gate is set, and otherwise admits every
// check with Remaining 7. It records every call's context deadline.
type fake struct {
	mu        sync.Mutex
	err       error
	gate      chan struct{}
	pingErr   error
	calls     atomic.Int64
	pings     atomic.Int64
	entered   chan struct{} // receives once per call, when non-nil
	deadlines []time.Duration
	noDL      int
}

func (f *fake) set(err error, gate chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err, f.gate = err, gate
}

func (f *fake) Apply(ctx context.Context, now time.Time, checks []algo.Check) ([]algo.Decision, error) {
	f.calls.Add(1)
	f.mu.Lock()
	err, gate := f.err, f.gate
	if dl, ok := ctx.Deadline(); ok {
		f.deadlines = append(f.deadlines, time.Until(dl))
	} else {
		f.noDL++
	}
	f.mu.Unlock()
	if f.entered != nil {
		f.entered <- struct{}{}
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err != nil {
		return nil, err
	}
	out := make([]algo.Decision, len(checks))
	for i := range out {
		out[i] = algo.Decision{Allowed: true, Remaining: 7}
	}
	return out, nil
}

func (f *fake) Ping(context.Context) error {
	f.pings.Add(1)
	return f.pingErr
}

// recorder is a local fallback that records the checks it got and admits
// them with Remaining = the limit it saw.
type recorder struct {
	mu     sync.Mutex
	checks []algo.Check
}

func (r *recorder) Apply(ctx context.Context, now time.Time, checks []algo.Check) ([]algo.Decision, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.checks = append(r.checks, checks...)
	r.mu.Unlock()
	out := make([]algo.Decision, len(checks))
	for i, c := range checks {
		out[i] = algo.Decision{Allowed: true, Remaining: c.Policy.Limit}
	}
	return out, nil
}

func chk(limit, burst, hits int64, refund bool) algo.Check {
	return algo.Check{
		Domain: "d", Entries: []algo.Entry{{Key: "k", Value: "v"}}, HashTag: -1,
		Policy: algo.Policy{Algorithm: algo.TokenBucket, Limit: limit, Period: algo.Minute, Burst: burst},
		Hits:   hits, Refund: refund,
	}
}

func TestShare(t *testing.T) {
	tests := []struct {
		v, n, want int64
	}{
		{v: 0, n: 3, want: 0},   // a blocking limit stays blocking
		{v: 1, n: 3, want: 1},   // never rounded down to 0
		{v: 2, n: 3, want: 1},   //
		{v: 3, n: 3, want: 1},   //
		{v: 4, n: 3, want: 2},   // rounded up
		{v: 10, n: 1, want: 10}, //
		{v: 10, n: 4, want: 3},  //
		{v: algo.MaxLimit, n: 2, want: 1 << 31},
	}
	for _, tt := range tests {
		if got := share(tt.v, tt.n); got != tt.want {
			t.Errorf("share(%d, %d) = %d, want %d", tt.v, tt.n, got, tt.want)
		}
	}
}

func TestDivideLeavesInputAlone(t *testing.T) {
	in := []algo.Check{chk(10, 15, 1, false), chk(1, 0, 1, false)}
	out := divide(in, 4)
	if in[0].Policy.Limit != 10 || in[0].Policy.Burst != 15 {
		t.Fatalf("divide changed its input: %+v", in[0].Policy)
	}
	want := []algo.Policy{
		{Algorithm: algo.TokenBucket, Limit: 3, Period: algo.Minute, Burst: 4},
		{Algorithm: algo.TokenBucket, Limit: 1, Period: algo.Minute, Burst: 0},
	}
	for i := range want {
		if out[i].Policy != want[i] {
			t.Errorf("check %d: policy %+v, want %+v", i, out[i].Policy, want[i])
		}
	}
}

// newTest returns a Backend around f with a fresh registry.
func newTest(t *testing.T, f Limiter, opts Options) (*Backend, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	if fk, ok := f.(*fake); ok && opts.Ping == nil {
		opts.Ping = fk.Ping
	}
	b, err := New(f, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return b, reg
}

func TestModes(t *testing.T) {
	checks := []algo.Check{
		chk(4, 0, 1, false),  // consuming
		chk(4, 0, 0, false),  // check only
		chk(4, 0, 2, true),   // refund
		chk(10, 6, 3, false), // consuming, burst 6
	}
	const cooldown = 2 * time.Second
	tests := []struct {
		mode Mode
		// want is nil when Apply must fail.
		want []algo.Decision
		// local is what the fallback must have received (limit, burst).
		local [][2]int64
	}{
		{mode: ModeError},
		{mode: ModeAllow, want: []algo.Decision{
			{Allowed: true, Remaining: 4}, {Allowed: true, Remaining: 4}, {Allowed: true, Remaining: 4}, {Allowed: true, Remaining: 6},
		}},
		{mode: ModeDeny, want: []algo.Decision{
			{ResetAfter: cooldown.Microseconds(), RetryAfter: cooldown.Microseconds()}, {Allowed: true}, {Allowed: true},
			{ResetAfter: cooldown.Microseconds(), RetryAfter: cooldown.Microseconds()},
		}},
		{mode: ModeLocal, want: []algo.Decision{
			{Allowed: true, Remaining: 2}, {Allowed: true, Remaining: 2}, {Allowed: true, Remaining: 2}, {Allowed: true, Remaining: 4},
		}, local: [][2]int64{{2, 0}, {2, 0}, {2, 0}, {4, 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			f := &fake{err: errRefused}
			loc := &recorder{}
			b, reg := newTest(t, f, Options{Mode: tt.mode, Local: loc, ExpectedReplicas: 3, Breaker: BreakerOptions{Cooldown: cooldown}})
			got, err := b.Apply(context.Background(), time.Now(), checks)
			if tt.want == nil {
				if err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
					t.Fatalf("Apply: %v, %v; want the primary's error", got, err)
				}
			} else {
				if err != nil {
					t.Fatalf("Apply: %v", err)
				}
				if fmt.Sprint(got) != fmt.Sprint(tt.want) {
					t.Errorf("decisions %+v, want %+v", got, tt.want)
				}
			}
			var local [][2]int64
			for _, c := range loc.checks {
				local = append(local, [2]int64{c.Policy.Limit, c.Policy.Burst})
			}
			if fmt.Sprint(local) != fmt.Sprint(tt.local) {
				t.Errorf("local fallback got limits %v, want %v", local, tt.local)
			}
			if checks[0].Policy.Limit != 4 {
				t.Errorf("Apply changed the caller's checks")
			}
			if n := testutil.ToFloat64(b.failures.WithLabelValues(tt.mode.String())); n != 1 {
				t.Errorf("failure-mode counter %v, want 1", n)
			}
			if n := testutil.ToFloat64(b.errors.WithLabelValues(kindConnection)); n != 1 {
				t.Errorf("connection errors %v, want 1", n)
			}
			if n, err := testutil.GatherAndCount(reg); err != nil || n == 0 {
				t.Errorf("registry: %d series, %v", n, err)
			}
		})
	}
}

// TestAllowKeepsBlockingRules: failing open still denies what no counter
// state could admit (a limit of 0, hits above the capacity).
func TestAllowKeepsBlockingRules(t *testing.T) {
	tests := []struct {
		name  string
		check algo.Check
		want  bool
	}{
		{"limit 0", chk(0, 0, 1, false), false},
		{"hits above burst", chk(10, 5, 6, false), false},
		{"hits at burst", chk(10, 5, 5, false), true},
		{"check only on limit 0", chk(0, 0, 0, false), true},
		{"refund on limit 0", chk(0, 0, 3, true), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := allowAll([]algo.Check{tt.check})
			if got[0].Allowed != tt.want {
				t.Errorf("allowAll(%+v) = %+v, want allowed=%v", tt.check, got[0], tt.want)
			}
		})
	}
}

// TestDenyRetryAfter: the deny mode's Retry-After is the rest of the
// cool-down, read from the injected clock.
func TestDenyRetryAfter(t *testing.T) {
	var now atomic.Int64
	now.Store(1_700_000_000 * algo.Second)
	f := &fake{err: errRefused}
	b, _ := newTest(t, f, Options{
		Mode: ModeDeny, Now: func() time.Time { return time.UnixMicro(now.Load()) },
		Breaker: BreakerOptions{Failures: 1, Cooldown: time.Hour},
	})
	c := []algo.Check{chk(5, 0, 1, false)}
	steps := []struct {
		advance int64
		want    int64
	}{
		{0, algo.Hour},                           // this call opens the breaker
		{algo.Minute, algo.Hour - algo.Minute},   // rest of the cool-down
		{algo.Minute, algo.Hour - 2*algo.Minute}, //
	}
	for i, s := range steps {
		now.Add(s.advance)
		got, err := b.Apply(context.Background(), time.UnixMicro(now.Load()), c)
		if err != nil || got[0].Allowed || got[0].RetryAfter != s.want {
			t.Errorf("step %d: %+v, %v; want denied with RetryAfter %d", i, got, err, s.want)
		}
	}
	if f.calls.Load() != 1 {
		t.Errorf("primary called %d times, want 1 (then the breaker is open)", f.calls.Load())
	}
}

// TestBreaker: N consecutive failures open the breaker; open, nothing
// reaches the primary; after the cool-down a probe that succeeds closes it.
func TestBreaker(t *testing.T) {
	f := &fake{err: errRefused}
	b, _ := newTest(t, f, Options{Mode: ModeError, Breaker: BreakerOptions{Failures: 3, Cooldown: 200 * time.Millisecond}})
	c := []algo.Check{chk(5, 0, 1, false)}
	for i := range 3 {
		if b.State() != StateClosed {
			t.Fatalf("call %d: state %v, want closed", i, b.State())
		}
		if _, err := b.Apply(context.Background(), time.Now(), c); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("call %d: %v, want the primary's error", i, err)
		}
	}
	// Read before the cool-down can pass: the third failure opened it.
	for i := range 50 {
		_, err := b.Apply(context.Background(), time.Now(), c)
		if b.State() == StateOpen && !errors.Is(err, ErrOpen) {
			t.Fatalf("open breaker, call %d: %v, want ErrOpen", i, err)
		}
	}
	if n := f.calls.Load(); n > 3+1 {
		// The cool-down may pass once on a slow machine: one probe.
		t.Fatalf("primary called %d times, want 3 (+1 probe at most)", n)
	}
	if n := testutil.ToFloat64(b.errors.WithLabelValues(kindOpen)); n < 49 {
		t.Errorf("circuit_open errors %v, want ≥ 49", n)
	}
	if err := b.Ping(context.Background()); b.State() == StateOpen && !errors.Is(err, ErrOpen) {
		t.Errorf("Ping while open: %v, want ErrOpen", err)
	}

	f.set(nil, nil)
	eventually.Holds(t, "a probe closes the breaker", func() bool {
		_, err := b.Apply(context.Background(), time.Now(), c)
		return err == nil && b.State() == StateClosed
	})
}

// TestHalfOpenProbes: the half-open breaker lets Probes calls through at
// once; the others get the failure mode without touching the primary.
func TestHalfOpenProbes(t *testing.T) {
	const probes = 2
	f := &fake{err: errRefused}
	b, _ := newTest(t, f, Options{Mode: ModeAllow, Breaker: BreakerOptions{Failures: 1, Cooldown: 10 * time.Millisecond, Probes: probes}})
	c := []algo.Check{chk(5, 0, 1, false)}
	if _, err := b.Apply(context.Background(), time.Now(), c); err != nil {
		t.Fatal(err)
	}
	eventually.Holds(t, "half-open", func() bool { return b.State() == StateHalfOpen })

	gate := make(chan struct{})
	f.entered = make(chan struct{}, 16)
	f.set(nil, gate)
	before := f.calls.Load()
	var wg sync.WaitGroup
	for range probes {
		wg.Go(func() {
			if _, err := b.Apply(context.Background(), time.Now(), c); err != nil {
				t.Error(err)
			}
		})
	}
	for range probes {
		<-f.entered // both probes are in flight
	}
	const others = 5
	for range others {
		got, err := b.Apply(context.Background(), time.Now(), c)
		if err != nil || !got[0].Allowed || got[0].Remaining != 5 {
			t.Errorf("call beside the probes: %+v, %v; want the allow mode's answer", got, err)
		}
	}
	if n := f.calls.Load() - before; n != probes {
		t.Errorf("primary called %d times while half-open, want %d", n, probes)
	}
	close(gate)
	wg.Wait()
	if b.State() != StateClosed {
		t.Errorf("state %v after %d successful probes, want closed", b.State(), probes)
	}
}

// TestCallerContext: a cancelled caller never counts against the primary;
// an expired caller deadline does (the primary was too slow for it); both
// get an error whatever the mode.
func TestCallerContext(t *testing.T) {
	c := []algo.Check{chk(5, 0, 1, false)}
	t.Run("canceled", func(t *testing.T) {
		f := &fake{entered: make(chan struct{}, 1)}
		f.set(nil, make(chan struct{})) // hangs
		b, _ := newTest(t, f, Options{Mode: ModeAllow, Breaker: BreakerOptions{Failures: 2}})
		for i := range 5 {
			ctx, cancel := context.WithCancel(context.Background())
			go func() { <-f.entered; cancel() }()
			if _, err := b.Apply(ctx, time.Now(), c); !errors.Is(err, context.Canceled) {
				t.Fatalf("call %d: %v, want context.Canceled", i, err)
			}
		}
		if b.State() != StateClosed {
			t.Errorf("state %v after cancelled calls, want closed", b.State())
		}
		if n := testutil.ToFloat64(b.errors.WithLabelValues(kindCanceled)); n != 5 {
			t.Errorf("canceled errors %v, want 5", n)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		f := &fake{}
		f.set(nil, make(chan struct{})) // hangs
		b, _ := newTest(t, f, Options{Mode: ModeAllow, Timeout: time.Hour, Breaker: BreakerOptions{Failures: 2, Cooldown: time.Hour}})
		// A deadline may expire before Apply even starts on a slow
		// machine; that call does not reach the primary, so try a few.
		for i := 0; b.State() != StateOpen; i++ {
			if i == 20 {
				t.Fatalf("breaker still %v after %d expired caller deadlines (%d reached the primary)", b.State(), i, f.calls.Load())
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
			_, err := b.Apply(ctx, time.Now(), c)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("call %d: %v, want DeadlineExceeded (no failure-mode answer for a caller that left)", i, err)
			}
		}
	})
	t.Run("already done", func(t *testing.T) {
		f := &fake{}
		b, _ := newTest(t, f, Options{Mode: ModeAllow})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := b.Apply(ctx, time.Now(), c); !errors.Is(err, context.Canceled) || f.calls.Load() != 0 {
			t.Errorf("Apply on a done context: %v, %d primary calls; want Canceled, 0", err, f.calls.Load())
		}
	})
}

// TestTimeout: the primary sees a deadline no later than Timeout, or the
// caller's when that is earlier.
func TestTimeout(t *testing.T) {
	const timeout = time.Minute
	f := &fake{}
	b, _ := newTest(t, f, Options{Timeout: timeout})
	c := []algo.Check{chk(5, 0, 1, false)}
	if _, err := b.Apply(context.Background(), time.Now(), c); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := b.Apply(ctx, time.Now(), c); err != nil {
		t.Fatal(err)
	}
	if f.noDL != 0 || len(f.deadlines) != 2 {
		t.Fatalf("%d calls without a deadline, %d with", f.noDL, len(f.deadlines))
	}
	if d := f.deadlines[0]; d > timeout || d < timeout/2 {
		t.Errorf("deadline %v from now, want at most the timeout %v", d, timeout)
	}
	if d := f.deadlines[1]; d > time.Second {
		t.Errorf("deadline %v from now, want the caller's (≤ 1s)", d)
	}
}

func TestRatio(t *testing.T) {
	f := &fake{}
	b, _ := newTest(t, f, Options{Breaker: BreakerOptions{Failures: 100, FailureRatio: 0.5, MinRequests: 10, Window: time.Hour}})
	c := []algo.Check{chk(5, 0, 1, false)}
	// Alternate failures and successes: never two failures in a row.
	for i := range 20 {
		if i%2 == 0 {
			f.set(errRefused, nil)
		} else {
			f.set(nil, nil)
		}
		_, _ = b.Apply(context.Background(), time.Now(), c)
		if b.State() == StateOpen {
			if i+1 < 10 {
				t.Fatalf("opened after %d calls, before MinRequests", i+1)
			}
			return
		}
	}
	t.Fatalf("50%% failures over 20 calls did not open the breaker")
}

func TestPing(t *testing.T) {
	f := &fake{pingErr: errRefused}
	b, _ := newTest(t, f, Options{Breaker: BreakerOptions{Failures: 1, Cooldown: time.Hour}})
	if err := b.Ping(context.Background()); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("Ping: %v, want the primary's error", err)
	}
	f.pingErr = nil
	if err := b.Ping(context.Background()); err != nil {
		t.Errorf("Ping: %v", err)
	}
	f.set(errRefused, nil)
	_, _ = b.Apply(context.Background(), time.Now(), []algo.Check{chk(5, 0, 1, false)})
	pings := f.pings.Load()
	err := b.Ping(context.Background())
	if !errors.Is(err, ErrOpen) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Ping while open: %v, want ErrOpen naming the last error", err)
	}
	if f.pings.Load() != pings {
		t.Errorf("Ping while open reached the primary")
	}
	if _, err := b.Apply(context.Background(), time.Now(), nil); err != nil {
		t.Errorf("Apply with no checks: %v", err)
	}
}

func TestStateMetric(t *testing.T) {
	f := &fake{err: errRefused}
	b, reg := newTest(t, f, Options{Breaker: BreakerOptions{Failures: 1, Cooldown: time.Hour}})
	_, _ = b.Apply(context.Background(), time.Now(), []algo.Check{chk(5, 0, 1, false)})
	want := `
# HELP envoy_rls_backend_breaker_state Circuit breaker state of the backend: 1 for the current state (closed, half_open or open), 0 for the others. With a breaker per shard (Redis Cluster masters) it is the most severe state of any shard: open, else half_open, else closed.
# TYPE envoy_rls_backend_breaker_state gauge
envoy_rls_backend_breaker_state{state="closed"} 0
envoy_rls_backend_breaker_state{state="half_open"} 0
envoy_rls_backend_breaker_state{state="open"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "envoy_rls_backend_breaker_state"); err != nil {
		t.Error(err)
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{errRefused, kindConnection},
		{fmt.Errorf("redisalgo: %w", syscall.ECONNRESET), kindConnection},
		{io.EOF, kindConnection},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), kindTimeout},
		{&net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, kindTimeout},
		{errors.New("redis: connection pool timeout"), kindTimeout},
		{replyError("NOSCRIPT No matching script"), kindReply},
		{fmt.Errorf("%w (last error: x)", ErrOpen), kindOpen},
		{context.Canceled, kindCanceled},
		{errors.New("something else"), kindOther},
	}
	for _, tt := range tests {
		if got := classify(tt.err); got != tt.want {
			t.Errorf("classify(%v) = %s, want %s", tt.err, got, tt.want)
		}
	}
}

type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

func TestParseMode(t *testing.T) {
	for _, m := range []Mode{ModeError, ModeAllow, ModeDeny, ModeLocal} {
		got, err := ParseMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseMode(%q) = %v, %v", m, got, err)
		}
	}
	if _, err := ParseMode("open"); err == nil || !strings.Contains(err.Error(), "error|allow|deny|local") {
		t.Errorf("ParseMode(open): %v, want an error listing the modes", err)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string // substring of the error; "" for valid
	}{
		{"zero", Options{}, ""},
		{"local without store", Options{Mode: ModeLocal}, "Local"},
		{"local", Options{Mode: ModeLocal, Local: &recorder{}, ExpectedReplicas: 3}, ""},
		{"unknown mode", Options{Mode: 9}, "mode 9"},
		{"replicas", Options{ExpectedReplicas: -1}, "ExpectedReplicas"},
		{"timeout", Options{Timeout: -1}, "Timeout"},
		{"failures", Options{Breaker: BreakerOptions{Failures: -1}}, "Breaker.Failures"},
		{"ratio", Options{Breaker: BreakerOptions{FailureRatio: 1.5}}, "Breaker.FailureRatio"},
		{"cooldown", Options{Breaker: BreakerOptions{Cooldown: -time.Second}}, "Breaker.Cooldown"},
		{"probes", Options{Breaker: BreakerOptions{Probes: -1}}, "Breaker.Probes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate: %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Validate: %v, want an error naming %s", err, tt.want)
			}
		})
	}
}

// TestNewErrors: New reports bad arguments instead of panicking.
func TestNewErrors(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(&fake{}, Options{Registerer: reg}); err != nil {
		t.Fatalf("New: %v", err)
	}
	tests := []struct {
		name    string
		primary Limiter
		opts    Options
		want    string
	}{
		{"nil primary", nil, Options{}, "nil primary"},
		{"local mode without a store", &fake{}, Options{Mode: ModeLocal}, "Local"},
		{"registered twice", &fake{}, Options{Registerer: reg}, "register metrics"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.primary, tt.opts); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// BenchmarkApplyUnderCallerDeadline is one request through the breaker to
// a primary that answers at once, under a caller deadline earlier than
// Timeout's (as Envoy's 20 ms is under the default 100 ms; scaled up here
// so that it does not pass during the run) and under none.
func BenchmarkApplyUnderCallerDeadline(b *testing.B) {
	const timeout = time.Hour
	for _, bc := range []struct {
		name     string
		deadline time.Duration
	}{{"caller-earlier", timeout / 5}, {"none", 0}} {
		b.Run(bc.name, func(b *testing.B) {
			fb, err := New(&fake{}, Options{Mode: ModeAllow, Timeout: timeout})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			if bc.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, bc.deadline)
				defer cancel()
			}
			checks := []algo.Check{chk(10, 10, 1, false)}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := fb.Apply(ctx, time.Now(), checks); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package readiness

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// published records what OnChange was told, as "ready" or the reason.
type published struct {
	mu  sync.Mutex
	got []string
}

func (p *published) onChange(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		p.got = append(p.got, "ready")
		return
	}
	p.got = append(p.got, err.Error())
}

func (p *published) list() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.got...)
}

var errDown = errors.New("backend: down")

// TestTrackerPublishesFlips steps a check through results and a drain: each
// Check answers the current state, and OnChange hears every flip once, in
// order, and nothing else.
func TestTrackerPublishesFlips(t *testing.T) {
	var backend atomic.Pointer[error]
	set := func(err error) { backend.Store(&err) }
	set(nil)
	p := &published{}
	tr := New(context.Background(), Options{
		Check:    func(context.Context) error { return *backend.Load() },
		OnChange: p.onChange,
	})
	steps := []struct {
		name    string
		backend error
		drain   bool
		want    error
	}{
		{name: "up", want: nil},
		{name: "still up", want: nil},
		{name: "down", backend: errDown, want: errDown},
		{name: "still down", backend: errDown, want: errDown},
		{name: "back", want: nil},
		{name: "draining", drain: true, want: ErrDraining},
		{name: "draining with the backend down", backend: errDown, want: ErrDraining},
		{name: "draining with the backend back", want: ErrDraining},
	}
	for _, s := range steps {
		set(s.backend)
		if s.drain {
			tr.Drain()
		}
		if err := tr.Check(context.Background()); !errors.Is(err, s.want) {
			t.Fatalf("%s: Check = %v, want %v", s.name, err, s.want)
		}
	}
	want := []string{"ready", errDown.Error(), "ready", ErrDraining.Error()}
	if got := p.list(); !slices.Equal(got, want) {
		t.Errorf("OnChange heard %q, want %q", got, want)
	}
}

// TestTrackerFirstAnswerUnready: New publishes the first answer even when
// it is "not ready", so a publisher never starts from its own default.
func TestTrackerFirstAnswerUnready(t *testing.T) {
	p := &published{}
	New(context.Background(), Options{Check: func(context.Context) error { return errDown }, OnChange: p.onChange})
	if got := p.list(); !slices.Equal(got, []string{errDown.Error()}) {
		t.Errorf("OnChange heard %q, want the first answer %q", got, errDown)
	}
}

// TestTrackerTimeout: a check that hangs is cut off by Timeout and counts
// as not ready.
func TestTrackerTimeout(t *testing.T) {
	tr := New(context.Background(), Options{
		Check:   func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() },
		Timeout: 10 * time.Millisecond,
	})
	if err := tr.Check(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Check = %v, want the deadline", err)
	}
}

// TestTrackerRunFollowsWithoutProbes: with nobody calling Check, Run still
// publishes a backend that fails and recovers.
func TestTrackerRunFollowsWithoutProbes(t *testing.T) {
	var down atomic.Bool
	changes := make(chan error, 10)
	tr := New(context.Background(), Options{
		Check: func(context.Context) error {
			if down.Load() {
				return errDown
			}
			return nil
		},
		OnChange: func(err error) { changes <- err },
		Interval: time.Millisecond,
	})
	if err := <-changes; err != nil {
		t.Fatalf("first answer %v, want ready", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = tr.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	// A bound for a broken Run, not a timing assertion: it ticks every ms.
	const bound = 10 * time.Second
	for _, want := range []error{errDown, nil} {
		down.Store(want != nil)
		select {
		case got := <-changes:
			if !errors.Is(got, want) {
				t.Fatalf("Run published %v, want %v", got, want)
			}
		case <-time.After(bound):
			t.Fatalf("Run did not publish %v", want)
		}
	}
}

// TestTrackerConcurrent runs probes, Run and a drain together under -race:
// every publication is a flip, and the last one is "not ready".
func TestTrackerConcurrent(t *testing.T) {
	var n atomic.Int64
	p := &published{}
	tr := New(context.Background(), Options{
		Check: func(context.Context) error {
			if n.Add(1)%3 == 0 {
				return errDown
			}
			return nil
		},
		OnChange: p.onChange,
		Interval: time.Millisecond,
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = tr.Run(ctx) }()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				_ = tr.Check(context.Background())
			}
		}()
	}
	tr.Drain()
	cancel()
	wg.Wait()
	if err := tr.Check(context.Background()); !errors.Is(err, ErrDraining) {
		t.Errorf("Check after Drain = %v, want %v", err, ErrDraining)
	}
	// Unready for whichever reason came first: a drain while the backend
	// is down is no flip.
	got := p.list()
	if len(got) == 0 || got[len(got)-1] == "ready" {
		t.Errorf("last published %q, want not ready", got)
	}
	for i := 1; i < len(got); i++ {
		if (got[i] == "ready") == (got[i-1] == "ready") {
			t.Fatalf("published %q then %q: not a flip", got[i-1], got[i])
		}
	}
}

package algo

import (
	"reflect"
	"slices"
	"testing"
)

// TestSpecs holds the algorithm table complete: every algorithm has a row
// with a name, a unique key letter and a shape, and the table has no row
// Algorithms leaves out.
func TestSpecs(t *testing.T) {
	letters := map[byte]Algorithm{}
	for _, a := range Algorithms {
		s, ok := a.Spec()
		if !ok {
			t.Fatalf("algorithm %d has no row in specs", a)
		}
		if s.Name == "" || s.Letter == 0 || s.Letter == 'x' || s.Shape == 0 {
			t.Errorf("row %d = %+v: want a name, a letter other than 'x' and a shape", a, s)
		}
		if b, dup := letters[s.Letter]; dup {
			t.Errorf("%s and %s share key letter %q", b, a, s.Letter)
		}
		letters[s.Letter] = a
		if got, ok := ByLetter(s.Letter); !ok || got != a {
			t.Errorf("ByLetter(%q) = %v, %v; want %v", s.Letter, got, ok, a)
		}
		if s.MayQueue && !s.UsesBurst {
			t.Errorf("%s may queue without a bucket: reserve.go consumes at a later time only in a bucket", a)
		}
	}
	for a := range specs {
		if specs[a].Name != "" && !slices.Contains(Algorithms, Algorithm(a)) {
			t.Errorf("row %d (%s) is missing from Algorithms", a, specs[a].Name)
		}
	}
	if _, ok := Algorithm(0).Spec(); ok {
		t.Error("the zero Algorithm has a row")
	}
}

func TestListNames(t *testing.T) {
	tests := []struct {
		list []Algorithm
		want string
	}{
		{nil, ""},
		{[]Algorithm{GCRA}, "gcra"},
		{Where(Spec.Bursting), "token_bucket or gcra"},
		{Where(Spec.Leasable), "fixed_window, token_bucket or gcra"},
	}
	for _, tt := range tests {
		if got := ListNames(tt.list); got != tt.want {
			t.Errorf("ListNames(%v) = %q, want %q", tt.list, got, tt.want)
		}
	}
}

// TestCodecRoundTrip encodes every stored state that random steps of
// every algorithm reach and decodes it back.
func TestCodecRoundTrip(t *testing.T) {
	for _, a := range Algorithms {
		for _, seed := range seeds(20) {
			r := newRand(seed)
			p := randPolicy(r, a)
			for _, ev := range simulate(p, r, 200, true) {
				if Expiry(p, ev.after, ev.now) == 0 {
					continue // deleted, not stored
				}
				roundTrip(t, p, ev.after)
			}
		}
	}
}

func roundTrip(t *testing.T, p Policy, s State) {
	t.Helper()
	if p.Algorithm.spec().Shape == ShapeLog {
		entries := EncodeLog(s)
		times := make([]int64, len(entries))
		for i, e := range entries {
			times[i] = e.Score
		}
		if got := DecodeLog(times); !reflect.DeepEqual(got, s) {
			t.Fatalf("%+v: log %+v reads back as %+v", p, s, got)
		}
		return
	}
	v, err := EncodeState(p, s)
	if err != nil {
		t.Fatalf("EncodeState(%+v, %+v): %v", p, s, err)
	}
	got, err := DecodeState(p, v)
	if p.KeyedWindow() {
		// The key names the window: the value holds the count alone.
		if got.Time != 0 {
			t.Fatalf("%+v: %q reads back with Time %d, want 0 (the key's)", p, v, got.Time)
		}
		got.Time = WindowIndex(s.Time, p.Period) * p.Period
	}
	if err != nil || !reflect.DeepEqual(got, s) {
		t.Fatalf("%+v: %+v stored as %q reads back as %+v, %v", p, s, v, got, err)
	}
}

// TestEncodeExamples pins the bytes of apply.lua's header.
func TestEncodeExamples(t *testing.T) {
	minute := Policy{Algorithm: FixedWindow, Limit: 100, Period: Minute}
	tests := []struct {
		p    Policy
		s    State
		want string
	}{
		{minute, State{Time: 29934682 * Minute, Count: 12}, "12"},
		{Policy{Algorithm: SlidingWindow, Limit: 9, Period: Second}, State{Time: 5 * Second, Count: 3, Prev: 10}, "531012"},
		{Policy{Algorithm: SlidingWindow, Limit: 9, Period: Second}, State{Time: 5 * Second}, "500"},
		{minute, State{Time: 2 * Minute, Count: 1_000_000_000}, "1000000000"},
		{Policy{Algorithm: SlidingWindow, Limit: 9, Period: Second}, State{Time: 2 * Second, Count: 1_000_000_000, Prev: 3}, "2:1000000000:3"},
		{Policy{Algorithm: TokenBucket, Limit: 3, Period: Second}, State{Time: 42}, "42"},
		{Policy{Algorithm: GCRA, Limit: 3, Period: Second}, State{Time: 42, Frac: 2}, "42:2"},
		{Policy{Algorithm: SlidingWindow, Limit: 200, Period: Second, SubWindows: 30}, State{Time: subStart(35, Second, 30), Subs: []int64{7, 0, 40}}, "z:2070014"},
	}
	for _, tt := range tests {
		if got, err := EncodeState(tt.p, tt.s); got != tt.want || err != nil {
			t.Errorf("EncodeState(%+v) = %q, %v; want %q", tt.s, got, err, tt.want)
		}
	}
	if got := EncodeLog(State{Log: []int64{5, 5, 9}}); !reflect.DeepEqual(got, []LogEntry{{5, "5:000000"}, {5, "5:000001"}, {9, "9:000000"}}) {
		t.Errorf("EncodeLog = %+v", got)
	}
}

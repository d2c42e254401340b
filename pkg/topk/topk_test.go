package topk

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

var (
	t0  = time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	lim = Key{Domain: "d", Rule: "d/user", Limit: "0"}
)

func user(v string) []algo.Entry { return []algo.Entry{{Key: "user", Value: v}} }

func newSet(t testing.TB, o Options) *Set {
	t.Helper()
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func top(t testing.TB, s *Set, now time.Time, window time.Duration, n int) LimitTop {
	t.Helper()
	rep, err := s.Top(now, window, n)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range rep.Limits {
		if l.Key == lim {
			return l
		}
	}
	return LimitTop{Key: lim}
}

func find(items []Item, value string) (Item, bool) {
	for _, it := range items {
		if it.Value == value {
			return it, true
		}
	}
	return Item{}, false
}

// checkBounds holds every listed item to lower ≤ true ≤ count ≤ true+N/K,
// and asks that every value above N/K is listed (n is large enough to
// list them all).
func checkBounds(t *testing.T, items []Item, truth map[string]uint64, total uint64, k int) {
	t.Helper()
	bound := total / uint64(k)
	for _, it := range items {
		tr := truth[it.Value]
		if it.Lower > tr || it.Count < tr || it.Count > tr+bound {
			t.Errorf("%s: lower %d, count %d, true %d, bound N/K %d", it.Value, it.Lower, it.Count, tr, bound)
		}
	}
	for v, c := range truth {
		if c > bound {
			if _, ok := find(items, v); !ok {
				t.Errorf("%s: true count %d above N/K %d, not listed", v, c, bound)
			}
		}
	}
}

// TestAdversarialStreams feeds streams built to break a heavy-hitter
// sketch: a flood of distinct values with one hot value among them, the
// hot value arriving only at the end, and values each just below N/K.
func TestAdversarialStreams(t *testing.T) {
	type stream func(add func(string, bool))
	tests := []struct {
		name   string
		k      int
		stream stream
		// hot, when set, must be at the head of both lists.
		hot string
	}{
		{name: "one hot among 100k distinct", k: 32, hot: "hot", stream: func(add func(string, bool)) {
			for i := range 100_000 {
				add("u"+strconv.Itoa(i), false)
				if i%10 == 0 {
					add("hot", true)
				}
			}
		}},
		{name: "hot arrives after the flood", k: 16, hot: "late", stream: func(add func(string, bool)) {
			for i := range 50_000 {
				add("u"+strconv.Itoa(i), false)
			}
			for range 10_000 {
				add("late", true)
			}
		}},
		{name: "round robin over 2K values", k: 16, stream: func(add func(string, bool)) {
			for range 200 {
				for i := range 32 {
					add("rr"+strconv.Itoa(i), i%2 == 0)
				}
			}
		}},
		{name: "zipf", k: 32, hot: "z0", stream: func(add func(string, bool)) {
			z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.2, 1, 1<<20)
			for range 200_000 {
				v := z.Uint64()
				add("z"+strconv.FormatUint(v, 10), v < 3)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSet(t, Options{K: tc.k})
			seen, denied := map[string]uint64{}, map[string]uint64{}
			var nSeen, nDenied uint64
			tc.stream(func(v string, d bool) {
				s.Record(t0, lim.Domain, lim.Rule, lim.Limit, user(v), d)
				seen["user="+v]++
				nSeen++
				if d {
					denied["user="+v]++
					nDenied++
				}
			})
			lt := top(t, s, t0, time.Minute, 1000)
			if lt.Seen != nSeen || lt.Denied != nDenied {
				t.Fatalf("totals %d/%d, want %d/%d", lt.Seen, lt.Denied, nSeen, nDenied)
			}
			if len(lt.TopSeen) > tc.k {
				t.Fatalf("%d items from one summary of %d slots", len(lt.TopSeen), tc.k)
			}
			checkBounds(t, lt.TopSeen, seen, nSeen, tc.k)
			checkBounds(t, lt.TopDenied, denied, nDenied, tc.k)
			if tc.hot != "" {
				if lt.TopSeen[0].Value != "user="+tc.hot || lt.TopDenied[0].Value != "user="+tc.hot {
					t.Errorf("heads %q, %q; want user=%s in both", lt.TopSeen[0].Value, lt.TopDenied[0].Value, tc.hot)
				}
			}
		})
	}
}

// TestMergeAndDecay spreads a stream over minutes: a window merges the
// buckets it covers (the live one and Window/Bucket before it), and a
// value leaves a window when its buckets do, and the ring entirely after
// Buckets+1 buckets.
func TestMergeAndDecay(t *testing.T) {
	s := newSet(t, Options{K: 8})
	// Minute 0: "a" 30 times; minute 5: "b" 20 times; minute 9: "c" 10
	// times; each with noise that fills the summaries.
	noise := 0
	feed := func(min int, v string, n int) {
		at := t0.Add(time.Duration(min)*time.Minute + time.Second)
		for range n {
			s.Record(at, lim.Domain, lim.Rule, lim.Limit, user(v), true)
			s.Record(at, lim.Domain, lim.Rule, lim.Limit, user("n"+strconv.Itoa(noise)), false)
			noise++
		}
	}
	feed(0, "a", 30)
	feed(5, "b", 20)
	feed(9, "c", 10)
	at9 := t0.Add(9*time.Minute + 30*time.Second)
	tests := []struct {
		name    string
		now     time.Time
		window  time.Duration
		want    map[string]uint64 // exact denials of the listed values
		notWant []string
	}{
		{name: "last minute at 9", now: at9, window: time.Minute, want: map[string]uint64{"c": 10}, notWant: []string{"a", "b"}},
		{name: "last 5 minutes at 9", now: at9, window: 5 * time.Minute, want: map[string]uint64{"b": 20, "c": 10}, notWant: []string{"a"}},
		{name: "last 10 minutes at 9", now: at9, window: 10 * time.Minute, want: map[string]uint64{"a": 30, "b": 20, "c": 10}},
		{name: "last 10 minutes at 10: minute 0 still covered", now: t0.Add(10 * time.Minute), window: 10 * time.Minute, want: map[string]uint64{"a": 30, "b": 20, "c": 10}},
		{name: "last 10 minutes at 11: minute 0 gone", now: t0.Add(11 * time.Minute), window: 10 * time.Minute, want: map[string]uint64{"b": 20, "c": 10}, notWant: []string{"a"}},
		{name: "last 10 minutes at 20: all gone", now: t0.Add(20 * time.Minute), window: 10 * time.Minute, notWant: []string{"a", "b", "c"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lt := top(t, s, tc.now, tc.window, 100)
			var want uint64
			for v, n := range tc.want {
				want += n
				// Denials are only a, b and c: their summaries never
				// fill, so the counts are exact.
				it, ok := find(lt.TopDenied, "user="+v)
				if !ok || it.Count != n || it.Lower != n {
					t.Errorf("%s: %+v (listed %v), want exactly %d", v, it, ok, n)
				}
			}
			if lt.Denied != want {
				t.Errorf("denied %d, want %d", lt.Denied, want)
			}
			for _, v := range tc.notWant {
				if _, ok := find(lt.TopDenied, "user="+v); ok {
					t.Errorf("%s listed after its bucket left the window", v)
				}
			}
		})
	}
	// A bucket the ring comes back to starts empty: minute 11 reuses
	// minute 0's slot.
	s.Record(t0.Add(11*time.Minute), lim.Domain, lim.Rule, lim.Limit, user("d"), true)
	lt := top(t, s, t0.Add(11*time.Minute), time.Minute, 100)
	if lt.Denied != 1 || len(lt.TopDenied) != 1 || lt.TopDenied[0].Value != "user=d" {
		t.Errorf("reused bucket: %+v", lt)
	}
}

// TestMergeBounds merges full summaries: a value spread evenly below each
// bucket's N/K is still bounded, and one above the window's N/K listed.
func TestMergeBounds(t *testing.T) {
	const k = 8
	s := newSet(t, Options{K: k})
	truth := map[string]uint64{}
	var total uint64
	r := rand.New(rand.NewPCG(3, 4))
	for m := range 10 {
		at := t0.Add(time.Duration(m) * time.Minute)
		for i := range 2000 {
			v := "u" + strconv.Itoa(r.IntN(500))
			if i%7 == 0 {
				v = "spread"
			}
			if m == 3 && i%2 == 0 {
				v = "burst"
			}
			s.Record(at, lim.Domain, lim.Rule, lim.Limit, user(v), false)
			truth["user="+v]++
			total++
		}
	}
	lt := top(t, s, t0.Add(9*time.Minute), 10*time.Minute, 1000)
	if lt.Seen != total {
		t.Fatalf("seen %d, want %d", lt.Seen, total)
	}
	checkBounds(t, lt.TopSeen, truth, total, k)
	if lt.SeenError != total/k {
		t.Errorf("error bound %d, want N/K = %d", lt.SeenError, total/k)
	}
}

// TestMergeFloors: a value one bucket holds exactly and another bucket
// evicted gets that bucket's smallest count as its possible share there,
// so its Count stays at or above the truth (TestMergeBounds's values
// carry overestimates large enough to hide a missing floor).
func TestMergeFloors(t *testing.T) {
	const k = 2
	s := newSet(t, Options{K: k})
	truth := map[string]uint64{}
	rec := func(minute int, v string, n int) {
		for range n {
			s.Record(t0.Add(time.Duration(minute)*time.Minute), lim.Domain, lim.Rule, lim.Limit, user(v), false)
			truth["user="+v]++
		}
	}
	rec(0, "a", 10) // held alone: exact, bucket not full (floor 0)
	rec(1, "a", 1)
	rec(1, "b", 5)
	rec(1, "c", 1) // evicts a (count 1): the bucket's floor is 2
	lt := top(t, s, t0.Add(time.Minute), time.Minute, 10)
	checkBounds(t, lt.TopSeen, truth, lt.Seen, k)
	if a, ok := find(lt.TopSeen, "user=a"); !ok || a.Count != 12 || a.Lower != 10 {
		t.Errorf("a: %+v (listed %v), want count 10 + floor 2, lower 10", a, ok)
	}
}

func TestHashedLabels(t *testing.T) {
	s := newSet(t, Options{Hash: true})
	s.Record(t0, lim.Domain, lim.Rule, lim.Limit, user("10.1.2.3"), true)
	s.Record(t0, lim.Domain, lim.Rule, lim.Limit, user("10.1.2.3"), true)
	s.Record(t0, lim.Domain, lim.Rule, lim.Limit, user("10.1.2.4"), false)
	lt := top(t, s, t0, time.Minute, 10)
	if len(lt.TopSeen) != 2 {
		t.Fatalf("%d values, want 2", len(lt.TopSeen))
	}
	for _, it := range lt.TopSeen {
		if strings.Contains(it.Value, "10.1") || !strings.HasPrefix(it.Value, "sha256:") || len(it.Value) != len("sha256:")+16 {
			t.Errorf("label %q: want sha256: and 16 hex digits, no raw value", it.Value)
		}
	}
	if lt.TopSeen[0].Value == lt.TopSeen[1].Value {
		t.Error("two values share a hashed label")
	}
	if lt.TopDenied[0].Value != lt.TopSeen[0].Value || lt.TopSeen[0].Count != 2 {
		t.Errorf("one value, two labels: %+v vs %+v", lt.TopDenied, lt.TopSeen)
	}
	// Another process (another key) labels the same value differently.
	other := newSet(t, Options{Hash: true})
	other.Record(t0, lim.Domain, lim.Rule, lim.Limit, user("10.1.2.3"), true)
	if top(t, other, t0, time.Minute, 1).TopSeen[0].Value == lt.TopSeen[0].Value {
		t.Error("hashed labels do not depend on the process's key")
	}
}

func TestLabels(t *testing.T) {
	tests := []struct {
		name    string
		entries []algo.Entry
		want    string
	}{
		{name: "entries", entries: []algo.Entry{{Key: "user", Value: "alice"}, {Key: "path", Value: "/v1"}}, want: "user=alice, path=/v1"},
		{name: "html stays text", entries: user("<img src=x onerror=alert(1)>"), want: "user=<img src=x onerror=alert(1)>"},
		{name: "long ascii", entries: user(strings.Repeat("x", 200)), want: "user=" + strings.Repeat("x", LabelBytes-len("user=")-len("…")) + "…"},
		{name: "long utf-8 cut at a rune", entries: user(strings.Repeat("é", 100))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSet(t, Options{})
			s.Record(t0, lim.Domain, lim.Rule, lim.Limit, tc.entries, false)
			got := top(t, s, t0, time.Minute, 1).TopSeen[0].Value
			if !utf8.ValidString(got) || len(got) > LabelBytes {
				t.Fatalf("label %q: %d bytes, valid UTF-8 %v", got, len(got), utf8.ValidString(got))
			}
			if tc.want != "" && got != tc.want {
				t.Errorf("label %q, want %q", got, tc.want)
			}
		})
	}
}

func TestMaxLimits(t *testing.T) {
	s := newSet(t, Options{MaxLimits: 2})
	for i := range 5 {
		s.Record(t0, "d", strconv.Itoa(i), "", user("a"), false)
	}
	rep, err := s.Top(t0, time.Minute, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Limits) != 2 || rep.Dropped != 3 {
		t.Errorf("%d limits, %d dropped; want 2 and 3", len(rep.Limits), rep.Dropped)
	}
}

func TestBadInput(t *testing.T) {
	for _, o := range []Options{{K: -1}, {K: 5000}, {Buckets: -1}, {Bucket: time.Millisecond}, {MaxLimits: -1}} {
		if _, err := New(o); err == nil {
			t.Errorf("New(%+v): no error", o)
		}
	}
	s := newSet(t, Options{})
	for _, w := range []time.Duration{0, -time.Minute, 11 * time.Minute} {
		if _, err := s.Top(t0, w, 5); err == nil {
			t.Errorf("Top(window %v): no error", w)
		}
	}
}

// TestTableConsistency replaces slots at random and checks that the table
// finds every monitored value and nothing else.
func TestTableConsistency(t *testing.T) {
	s := newSummary(16)
	r := rand.New(rand.NewPCG(5, 6))
	none := func(*[LabelBytes]byte) int { return 0 }
	for i := range 20_000 {
		s.add(r.Uint64N(64)*0x9e3779b97f4a7c15, none)
		if i%97 != 0 {
			continue
		}
		used := 0
		for _, e := range s.table {
			if e != 0 {
				used++
			}
		}
		if used != len(s.slots) {
			t.Fatalf("add %d: %d table entries for %d slots", i, used, len(s.slots))
		}
		for j := range s.slots {
			if _, ok := s.find(s.slots[j].fp); !ok {
				t.Fatalf("add %d: slot %d not found", i, j)
			}
			if int(s.heap[s.slots[j].heap].slot) != j {
				t.Fatalf("add %d: heap index of slot %d broken", i, j)
			}
		}
		for j := 1; j < len(s.heap); j++ {
			if s.less(j, (j-1)/2) {
				t.Fatalf("add %d: heap order broken at %d", i, j)
			}
		}
	}
}

func TestMemoryBound(t *testing.T) {
	// 256 limits × 11 buckets × 2 summaries × 32 slots.
	got := MemoryBound(Options{})
	if want := 256 * 11 * 2 * (32*SlotBytes + 64*4); got != want {
		t.Errorf("MemoryBound = %d, want %d", got, want)
	}
	t.Logf("default memory bound: %.1f MiB (slot %d bytes)", float64(got)/(1<<20), SlotBytes)
}

// TestRecordAlloc: once a limit is known, Record allocates nothing, for a
// value it holds, a value that replaces another, and hashed labels.
func TestRecordAlloc(t *testing.T) {
	for _, hash := range []bool{false, true} {
		t.Run(fmt.Sprintf("hash=%v", hash), func(t *testing.T) {
			s := newSet(t, Options{K: 8, Hash: hash})
			hot := []algo.Entry{{Key: "user", Value: "alice"}, {Key: "path", Value: "/v1/orders"}}
			distinct := make([][]algo.Entry, 64)
			for i := range distinct {
				distinct[i] = user("u" + strconv.Itoa(i))
			}
			s.Record(t0, lim.Domain, lim.Rule, lim.Limit, hot, false)
			if n := testing.AllocsPerRun(1000, func() { s.Record(t0, lim.Domain, lim.Rule, lim.Limit, hot, true) }); n != 0 {
				t.Errorf("held value: %v allocs per Record", n)
			}
			i := 0
			if n := testing.AllocsPerRun(1000, func() { s.Record(t0, lim.Domain, lim.Rule, lim.Limit, distinct[i%64], false); i++ }); n != 0 {
				t.Errorf("replacing values: %v allocs per Record", n)
			}
		})
	}
}

// BenchmarkRecord is the request path's cost per limit decision.
func BenchmarkRecord(b *testing.B) {
	for _, bc := range []struct {
		name string
		hash bool
		n    int // distinct values cycled
	}{
		{name: "one-value", n: 1},
		{name: "1000-values", n: 1000},
		{name: "1000-values/hashed", n: 1000, hash: true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := newSet(b, Options{Hash: bc.hash})
			vals := make([][]algo.Entry, bc.n)
			for i := range vals {
				vals[i] = []algo.Entry{{Key: "user", Value: "user-" + strconv.Itoa(i)}, {Key: "path", Value: "/v1/orders"}}
			}
			now := time.Now()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				s.Record(now, lim.Domain, lim.Rule, lim.Limit, vals[i%bc.n], i%4 == 0)
				i++
			}
		})
	}
}

// TestLongEntries: entries past the fingerprint's stack buffer are told
// apart and counted like short ones.
func TestLongEntries(t *testing.T) {
	s := newSet(t, Options{})
	a, b := strings.Repeat("a", 300)+"1", strings.Repeat("a", 300)+"2"
	for range 3 {
		s.Record(t0, lim.Domain, lim.Rule, lim.Limit, user(a), false)
	}
	s.Record(t0, lim.Domain, lim.Rule, lim.Limit, user(b), false)
	lt := top(t, s, t0, time.Minute, 10)
	if len(lt.TopSeen) != 2 || lt.TopSeen[0].Count != 3 || lt.TopSeen[1].Count != 1 {
		t.Errorf("long values: %+v, want counts 3 and 1", lt.TopSeen)
	}
}

// TestConcurrent records from several goroutines while reading, on many
// limits (the copy-on-write map and the cache) and one value per
// goroutine; run with -race. The totals are exact.
func TestConcurrent(t *testing.T) {
	s := newSet(t, Options{K: 4})
	const workers, each = 4, 2000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 50 {
			if _, err := s.Top(t0, time.Minute, 3); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := user("w" + strconv.Itoa(w))
			for i := range each {
				s.Record(t0, "d", "r"+strconv.Itoa(i%8), "", v, i%2 == 0)
			}
		}()
	}
	wg.Wait()
	<-done
	rep, err := s.Top(t0, time.Minute, 10)
	if err != nil {
		t.Fatal(err)
	}
	var seen, denied uint64
	for _, l := range rep.Limits {
		seen += l.Seen
		denied += l.Denied
		if len(l.TopSeen) != workers {
			t.Errorf("%s: %d values, want %d", l.Rule, len(l.TopSeen), workers)
		}
	}
	if len(rep.Limits) != 8 || seen != workers*each || denied != workers*each/2 {
		t.Errorf("%d limits, %d seen, %d denied; want 8, %d, %d", len(rep.Limits), seen, denied, workers*each, workers*each/2)
	}
}

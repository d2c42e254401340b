package evict

import (
	"fmt"
	"testing"
)

type item struct{ until int64 }

func fill(n int, until func(i int) int64) map[string]item {
	m := make(map[string]item, n)
	for i := range n {
		m[fmt.Sprint("k", i)] = item{until: until(i)}
	}
	return m
}

func TestSampled(t *testing.T) {
	const now = 100
	expired := func(v item) bool { return v.until <= now }
	until := func(v item) int64 { return v.until }
	tests := []struct {
		name        string
		m           map[string]item
		keep        func(string) bool
		wantExpired int
		wantEvicted bool
		wantGone    []string
	}{
		{"all expired: one sample's worth go", fill(20, func(int) int64 { return now }), nil, Sample, false, nil},
		{"few expired: only they go", fill(Sample, func(i int) int64 { return now + int64(i%2) }), nil, Sample / 2, false, []string{"k0", "k2"}},
		{"all live: the soonest goes", fill(Sample, func(i int) int64 { return now + 10 - int64(i) }), nil, 0, true, []string{"k7"}},
		{"the soonest is kept: the next goes", fill(Sample, func(i int) int64 { return now + 10 - int64(i) }), func(k string) bool { return k == "k7" }, 0, true, []string{"k6"}},
		{"everything kept: nothing goes", fill(Sample, func(int) int64 { return now }), func(string) bool { return true }, 0, false, nil},
		{"empty", map[string]item{}, nil, 0, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(tt.m)
			var seen []string
			gotExpired, gotEvicted := Sampled(tt.m, expired, until, tt.keep, func(k string) { seen = append(seen, k) })
			if gotExpired != tt.wantExpired || gotEvicted != tt.wantEvicted {
				t.Fatalf("Sampled = %d expired, evicted %v; want %d, %v", gotExpired, gotEvicted, tt.wantExpired, tt.wantEvicted)
			}
			gone := gotExpired
			if gotEvicted {
				gone++
			}
			if len(tt.m) != before-gone || len(seen) != gone {
				t.Fatalf("%d of %d entries left, %d reported dropped; want %d gone", len(tt.m), before, len(seen), gone)
			}
			for _, k := range tt.wantGone {
				if _, ok := tt.m[k]; ok {
					t.Errorf("%s is still there", k)
				}
			}
		})
	}
}

// TestSampledAllocs: making room allocates nothing, on the path of a
// store under a flood of new keys.
func TestSampledAllocs(t *testing.T) {
	m := fill(64, func(i int) int64 { return 200 + int64(i) })
	keep := []string{"k1"}
	allocs := testing.AllocsPerRun(100, func() {
		now := int64(100)
		_, evicted := Sampled(m, func(v item) bool { return v.until <= now }, func(v item) int64 { return v.until },
			func(k string) bool { return k == keep[0] }, nil)
		if evicted {
			m["k0"] = item{until: 200}
		}
	})
	if allocs != 0 {
		t.Errorf("Sampled allocates %v times per call", allocs)
	}
}

package rlqs

import (
	"math"
	"testing"
)

func TestFairShares(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name    string
		limit   int64
		demands []float64 // +Inf is Unknown
		want    []int64
	}{
		{"no instances", 100, nil, []int64{}},
		{"one instance gets all", 100, []float64{500}, []int64{100}},
		{"equal overload splits equally", 90, []float64{450, 450, 450}, []int64{30, 30, 30}},
		{"uneven split rounds by remainder then name", 100, []float64{500, 500, 500}, []int64{34, 33, 33}},
		{"small wanter keeps demand plus headroom", 100, []float64{10, 500, 500}, []int64{13, 44, 43}},
		{"idle instance gives its share away", 90, []float64{0, 450, 450}, []int64{1, 45, 44}},
		{"all under: leftover spread equally", 100, []float64{10, 10}, []int64{50, 50}},
		{"unknown demand counts as wanting an equal share", 90, []float64{inf, 450, 450}, []int64{30, 30, 30}},
		{"blocked limit gives nothing", 0, []float64{10, 10}, []int64{0, 0}},
		{"fewer tokens than instances", 2, []float64{100, 100, 100}, []int64{1, 1, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := make([]Demand, len(tt.demands))
			for i, d := range tt.demands {
				ds[i] = Demand{Instance: string(rune('a' + i)), PerPeriod: d, Unknown: math.IsInf(d, 1)}
			}
			got := FairShares(tt.limit, ds)
			checkShares(t, got, tt.want, tt.limit)
		})
	}
}

func checkShares(t *testing.T, got, want []int64, limit int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	var sum int64
	for i := range got {
		sum += got[i]
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("got %v, want %v", got, want)
			break
		}
	}
	if len(got) > 0 && limit > 0 && sum != limit {
		t.Errorf("shares %v sum to %d, want the limit %d", got, sum, limit)
	}
}

// TestFairSharesSumIsLimit checks the invariant on many inputs: whatever
// the demands, the shares sum to exactly the limit and none is negative.
func TestFairSharesSumIsLimit(t *testing.T) {
	for limit := int64(1); limit <= 50; limit += 7 {
		for n := 1; n <= 6; n++ {
			ds := make([]Demand, n)
			for i := range ds {
				ds[i] = Demand{Instance: string(rune('a' + i)), PerPeriod: float64((i * 37 * int(limit)) % 53)}
			}
			got := FairShares(limit, ds)
			var sum int64
			for _, s := range got {
				if s < 0 {
					t.Fatalf("limit %d demands %v: negative share in %v", limit, ds, got)
				}
				sum += s
			}
			if sum != limit {
				t.Fatalf("limit %d demands %v: shares %v sum to %d", limit, ds, got, sum)
			}
		}
	}
}

func TestBurstFor(t *testing.T) {
	tests := []struct {
		share, limit, burst, want int64
	}{
		{30, 90, 0, 30},   // burst defaults to the limit: one period's share
		{30, 90, 180, 60}, // a rule burst of twice the limit doubles it
		{1, 1000, 10, 1},  // never below one token
		{0, 90, 0, 0},     // no share, no bucket
		{33, 100, 100, 33},
	}
	for _, tt := range tests {
		if got := BurstFor(tt.share, tt.limit, tt.burst); got != tt.want {
			t.Errorf("BurstFor(%d, %d, %d) = %d, want %d", tt.share, tt.limit, tt.burst, got, tt.want)
		}
	}
}

package main

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	tests := []struct {
		name string
		in   []float64
		want float64
	}{
		{name: "none", in: nil, want: 0},
		{name: "odd", in: []float64{5, 1, 3}, want: 3},
		{name: "even", in: []float64{4, 1, 3, 2}, want: 2.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := make([]cmpSample, len(tt.in))
			for i, v := range tt.in {
				s[i] = cmpSample{row: &row{rps: v}}
			}
			if got := median(s, func(x cmpSample) float64 { return x.row.rps }); got != tt.want {
				t.Fatalf("median(%v) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

// TestFiguresPerCommand checks that a cell's medians keep each Redis
// command's calls and µs per decision, and that the mix lists them most
// frequent first with µs per call.
func TestFiguresPerCommand(t *testing.T) {
	c := &cmpCell{}
	for _, n := range []float64{1, 2, 3} {
		c.samples = append(c.samples, cmpSample{
			row:   &row{rps: n, p50: time.Duration(n) * time.Microsecond, redisReads: 0.25 * n, redisIn: 40 * n, redisOut: 10 * n},
			calls: map[string]float64{"incrby": 1, "expire": 1, "evalsha": 0.5 * n},
			usec:  map[string]float64{"incrby": 2, "expire": 1, "evalsha": 10 * n},
		})
	}
	f := figures(c)
	if !f.ok || f.rps != 2 || f.p50 != 2 || f.calls["evalsha"] != 1 || f.usec["evalsha"] != 20 || f.reads != 0.5 || f.in != 80 || f.out != 20 {
		t.Fatalf("figures = %+v, want medians rps 2, p50 2µs, evalsha 1 call 20 µs, 0.5 reads, 80 B in, 20 B out", f)
	}
	got := cmdMix(f)
	want := "evalsha 1.000 × 20.0 µs, expire 1.000 × 1.0 µs, incrby 1.000 × 2.0 µs (23.0 µs executing); 0.500 socket reads, 80 B in, 20 B out"
	if got != want {
		t.Fatalf("cmdMix = %q, want %q", got, want)
	}
}

// TestKeySets checks that every key set draws keys inside its space and
// that Zipf's draws are skewed: its most common key takes a large share.
func TestKeySets(t *testing.T) {
	for _, ks := range cmpKeySets(options{}) {
		t.Run(ks.name, func(t *testing.T) {
			value := ks.newValue()
			rnd := rand.New(rand.NewPCG(1, 2))
			seen := map[string]int{}
			const draws = 20000
			for i := range draws {
				v := value(rnd, int64(i))
				n, err := strconv.Atoi(strings.TrimPrefix(v, "u"))
				if err != nil || n < 0 || n >= zipfKeys {
					t.Fatalf("key %q out of range", v)
				}
				seen[v]++
			}
			top := 0
			for _, c := range seen {
				top = max(top, c)
			}
			share := float64(top) / draws
			if ks.name == "zipf" && share < 0.05 {
				t.Errorf("zipf: hottest key has %.3f of draws, want a skewed distribution", share)
			}
			if ks.name == "uniform" && share > 0.01 {
				t.Errorf("uniform: hottest key has %.3f of draws, want an even spread", share)
			}
		})
	}
}

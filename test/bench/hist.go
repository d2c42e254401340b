package main

import (
	"math/bits"
	"time"
)

// histogram records latencies in log-linear buckets: exact below 128 ns,
// then 128 buckets per power of two (under 1% error), up to maxTracked.
// Recording is a few instructions and never allocates, so each worker keeps
// its own and they are merged after the run.
type histogram struct {
	counts [histBuckets]uint64
	total  uint64
}

const (
	histSub     = 128 // sub-buckets per power of two
	histSubBits = 7
	maxShift    = 33 // values below 2^(histSubBits+1+maxShift) ns (~18 min)
	histBuckets = histSub + (maxShift+1)*histSub
)

func histIndex(v uint64) int {
	if v < histSub {
		return int(v)
	}
	shift := bits.Len64(v) - histSubBits - 1
	if shift > maxShift {
		return histBuckets - 1
	}
	return histSub + shift*histSub + int(v>>uint(shift)) - histSub
}

// histValue is the middle of bucket i.
func histValue(i int) uint64 {
	if i < histSub {
		return uint64(i)
	}
	shift := (i - histSub) / histSub
	m := uint64((i-histSub)%histSub + histSub)
	return m<<uint(shift) + (uint64(1)<<uint(shift))/2
}

func (h *histogram) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[histIndex(uint64(d))]++
	h.total++
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
}

// quantile returns the latency below which a fraction q of the samples lie.
func (h *histogram) quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	rank := uint64(q*float64(h.total) + 0.5)
	rank = min(max(rank, 1), h.total)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(histValue(i))
		}
	}
	return time.Duration(histValue(histBuckets - 1))
}

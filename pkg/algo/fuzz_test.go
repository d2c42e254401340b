package algo

import (
	"testing"
)

// FuzzStep runs arbitrary policies and op sequences (time steps, hits,
// refunds, clock steps back; sliding windows in 0..MaxSubWindows
// sub-windows) through Step and checks the invariants of
// checkExact on every step: no panic, Remaining within [0, capacity],
// ResetAfter ≥ 0, exact ResetAfter and Expiry, and Remaining consistent with
// what passes.
func FuzzStep(f *testing.F) {
	f.Add(uint8(0), uint32(100), uint64(Second), uint32(0), []byte{1, 2, 3, 4, 5, 6, 7, 8})
	f.Add(uint8(1), uint32(3), uint64(Second), uint32(0), []byte{0, 0, 0, 3, 9, 9, 9, 1, 200, 0, 0, 1})
	f.Add(uint8(2), uint32(7), uint64(7*Second+3), uint32(0), []byte{0, 1, 0, 1, 0, 1, 0, 1, 255, 255, 255, 2})
	f.Add(uint8(3), uint32(3), uint64(Second), uint32(5), []byte{0, 0, 0, 5, 1, 0, 0, 1, 0, 0, 0, 0x81})
	f.Add(uint8(4), uint32(1000), uint64(Hour), uint32(1), []byte{128, 0, 0, 1, 7, 0, 0, 3})
	f.Add(uint8(3), uint32(MaxLimit), uint64(Year), uint32(1<<20), []byte{0, 0, 0, 1, 0, 0, 1, 0x82})
	f.Add(uint8(1), uint32(10), uint64(Second), uint32(DefaultSubWindows), []byte{0, 0, 0, 10, 0, 40, 0, 1, 0x80, 2, 0, 3, 0, 0, 0, 0x85})
	f.Add(uint8(1), uint32(7), uint64(999_983), uint32(MaxSubWindows), []byte{0, 0, 0, 7, 0, 1, 0, 1, 5, 0, 0, 1})
	f.Fuzz(func(t *testing.T, alg uint8, limit uint32, period uint64, burst uint32, ops []byte) {
		p := Policy{Algorithm: Algorithm(alg%5 + 1), Limit: int64(limit), Period: int64(period % uint64(MaxPeriod+1)), Burst: int64(burst)}
		if p.Algorithm == SlidingLog {
			p.Limit %= 2000
		}
		if p.Algorithm == SlidingWindow {
			// A sliding window has no burst: the argument is its
			// sub-window count instead.
			p.SubWindows, p.Burst = int64(burst%uint32(MaxSubWindows+1)), 0
		}
		if p.Validate() != nil {
			return
		}
		var s State
		now := t0
		for len(ops) >= 4 {
			op := ops[:4]
			ops = ops[4:]
			// Bytes 0-2 scale a time step to the period; bit 7 of byte 0
			// steps back instead.
			gap := (int64(op[0]&0x7f)<<16 | int64(op[1])<<8 | int64(op[2])) * max(p.Period>>16, 1) / 16
			if op[0]&0x80 != 0 {
				gap = -gap
			}
			now += gap
			hits := int64(op[3] & 0x3f)
			if op[3]&0x40 != 0 {
				hits = p.Capacity() + int64(op[3]&0x3f) - 32
			}
			refund := op[3]&0x80 != 0
			if gap >= 0 {
				checkExact(t, p, s, now, hits, refund)
			} else {
				// A clock that went back can leave a bucket's TAT more than
				// a burst ahead: in debt at the earlier time, so Remaining
				// may be negative, at most a capacity and a token deep
				// (tokens in bucket.go).
				_, d := Step(p, s, now, hits, refund)
				if d.Remaining < -(p.Capacity()+1) || d.Remaining > p.Capacity() || d.ResetAfter < 0 {
					t.Fatalf("%+v now %d hits %d: %+v out of range", p, now, hits, d)
				}
			}
			s, _ = Step(p, s, now, hits, refund)
			if e := Expiry(p, s, now); e < 0 {
				t.Fatalf("negative expiry %d", e)
			}
		}
	})
}

package topk

import "unicode/utf8"

// LabelBytes is the most bytes of a value's label a summary keeps; a
// longer one is cut at a UTF-8 boundary and ends with "…". The identity
// of a value is its full 64-bit fingerprint, never the label, so two
// values with one long prefix stay apart.
const LabelBytes = 96

// slot is one monitored value of a summary.
type slot struct {
	fp uint64
	// err is what the value inherited from the value it replaced: its
	// count (in its heap entry) overestimates the value's occurrences
	// since it entered the summary, and count-err is a lower bound.
	err uint64
	// heap is the slot's place in summary.heap.
	heap  int32
	n     uint8
	label [LabelBytes]byte
}

// summary is one space-saving summary (Metwally, Agrawal and El Abbadi's
// algorithm): k slots, a min-heap of them by count, and an open-addressing
// table from fingerprint to slot. Adding a monitored value increments its
// count; adding another takes the slot of the smallest count m, with count
// m+1 and error m. With N adds, m ≤ N/k, so every value seen more than N/k
// times holds a slot, and no count is more than N/k above the truth.
//
// It never allocates after newSummary: the slots, heap and table are
// fixed arrays.
type summary struct {
	slots []slot
	// heap holds the counts and their slots, smallest count first; the
	// counts live here, not in the slots, so that sifting reads one array.
	heap []hent
	// table maps a fingerprint to slot index+1 (0: empty), linear
	// probing; its size is a power of two at least twice k.
	table []int32
	mask  uint64
	// total is the number of adds, N.
	total uint64
}

// hent is a heap entry: a slot's count.
type hent struct {
	count uint64
	slot  int32
}

// count is slot i's count.
func (s *summary) count(i int) uint64 { return s.heap[s.slots[i].heap].count }

func newSummary(k int) *summary {
	size := 1
	for size < 2*k {
		size *= 2
	}
	return &summary{
		slots: make([]slot, 0, k),
		heap:  make([]hent, 0, k),
		table: make([]int32, size),
		mask:  uint64(size - 1),
	}
}

// reset empties s for a new bucket, keeping its memory.
func (s *summary) reset() {
	s.slots = s.slots[:0]
	s.heap = s.heap[:0]
	clear(s.table)
	s.total = 0
}

// full reports whether every slot is taken: only then does an unmonitored
// value's count have the floor min().
func (s *summary) full() bool { return len(s.slots) == cap(s.slots) }

// min is the smallest count, the most any unmonitored value can have
// occurred; 0 until the summary is full.
func (s *summary) min() uint64 {
	if !s.full() || len(s.heap) == 0 {
		return 0
	}
	return s.heap[0].count
}

// find returns the table position holding fp's slot, or the empty position
// where it would go, and whether it was found.
func (s *summary) find(fp uint64) (pos uint64, found bool) {
	for pos = fp & s.mask; ; pos = (pos + 1) & s.mask {
		i := s.table[pos]
		if i == 0 {
			return pos, false
		}
		if s.slots[i-1].fp == fp {
			return pos, true
		}
	}
}

// remove deletes the table entry at pos, shifting later entries of its
// probe run back so lookups never stop at a hole (no tombstones: the table
// never fills up with them).
func (s *summary) remove(pos uint64) {
	s.table[pos] = 0
	for next := (pos + 1) & s.mask; s.table[next] != 0; next = (next + 1) & s.mask {
		home := s.slots[s.table[next]-1].fp & s.mask
		// Move next back to pos unless its home lies in (pos, next].
		if (next-home)&s.mask >= (next-pos)&s.mask {
			s.table[pos], s.table[next] = s.table[next], 0
			pos = next
		}
	}
}

// add counts one occurrence of the value fp; label writes the value's
// label into a slot's buffer when the value takes a slot, and returns its
// length.
func (s *summary) add(fp uint64, label func(dst *[LabelBytes]byte) int) {
	s.total++
	pos, found := s.find(fp)
	if found {
		h := int(s.slots[s.table[pos]-1].heap)
		s.heap[h].count++
		s.down(h)
		return
	}
	if !s.full() {
		i := int32(len(s.slots))
		s.slots = append(s.slots, slot{fp: fp, heap: int32(len(s.heap))})
		s.slots[i].n = uint8(label(&s.slots[i].label))
		s.heap = append(s.heap, hent{count: 1, slot: i})
		s.table[pos] = i + 1
		s.up(len(s.heap) - 1)
		return
	}
	// Replace the smallest: its count becomes the newcomer's error.
	i := s.heap[0].slot
	old, _ := s.find(s.slots[i].fp)
	s.remove(old)
	m := s.heap[0].count
	s.heap[0].count = m + 1
	sl := &s.slots[i]
	sl.fp, sl.err = fp, m
	sl.n = uint8(label(&sl.label))
	pos, _ = s.find(fp)
	s.table[pos] = i + 1
	s.down(0)
}

func (s *summary) less(a, b int) bool { return s.heap[a].count < s.heap[b].count }

func (s *summary) swap(a, b int) {
	s.heap[a], s.heap[b] = s.heap[b], s.heap[a]
	s.slots[s.heap[a].slot].heap = int32(a)
	s.slots[s.heap[b].slot].heap = int32(b)
}

func (s *summary) up(j int) {
	for j > 0 {
		p := (j - 1) / 2
		if !s.less(j, p) {
			return
		}
		s.swap(j, p)
		j = p
	}
}

func (s *summary) down(j int) {
	n := len(s.heap)
	for {
		c := 2*j + 1
		if c >= n {
			return
		}
		if r := c + 1; r < n && s.less(r, c) {
			c = r
		}
		if !s.less(c, j) {
			return
		}
		s.swap(j, c)
		j = c
	}
}

// truncate cuts dst's first n bytes, a label that did not fit, at a UTF-8
// boundary, ends them with "…", and returns the length kept.
func truncate(dst *[LabelBytes]byte, n int) int {
	const ell = "…"
	n = min(n, LabelBytes-len(ell))
	for n > 0 && !utf8.RuneStart(dst[n]) {
		n--
	}
	return n + copy(dst[n:], ell)
}

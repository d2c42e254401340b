// Package topk keeps, for each rate limit, the descriptor values most
// often seen and most often denied recently, in memory fixed in advance:
// the heavy hitters that per-value Prometheus series could not show
// without an unbounded number of series.
//
// Each limit has a ring of Options.Buckets+1 time buckets (one minute
// each by default); each bucket holds two space-saving summaries of K
// slots, one fed every decision of the limit (seen) and one fed only its
// denials (denied). A read merges the buckets of its window: the live one
// and the Window/Bucket before it, so "the last minute" covers between 60
// and 120 s. A bucket is emptied when the ring comes back to it, so a
// value stops showing once its buckets leave the window (decay).
//
// Error bound. In one summary of N adds, every value seen more than N/K
// times holds a slot, and each slot's count overestimates the truth by at
// most N/K (Count-Lower, also at most the smallest count). Merging adds
// counts bucket by bucket; a value a full bucket does not hold gets that
// bucket's smallest count as its possible share (at most N_b/K). So over
// a window of N decisions: every value with more than N/K of them is
// listed, and each listed Count is at most N/K above the truth, never
// below it; Lower is never above it.
//
// Memory bound. A limit takes (Buckets+1) × 2 × K slots of SlotBytes
// plus its tables (4 bytes per table entry, 2K to 4K entries per
// summary), allocated once at its first decision; at most MaxLimits limits
// are kept (later ones are counted in Report.Dropped, not tracked).
// MemoryBound states the total.
//
// Cost. Record takes a limit's lock, hashes the entries (hash/maphash,
// no allocation) and updates two summaries in O(log K); it allocates only
// the first time it sees a limit.
//
// Hashing. With Options.Hash, a value's label is the first 16 hex digits
// of SHA-256 over a per-process random key and the entries, instead of
// the entries themselves: raw values (IP addresses, user ids) never enter
// the summaries, and one client keeps one label for the process's life,
// but not across replicas or restarts.
//
// topk must not know about gRPC, the rules or the backends: it is fed
// (domain, rule, limit, entries, denied) by pkg/rls and read by the
// console.
package topk

import (
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// Defaults of Options.
const (
	DefaultK         = 32
	DefaultBuckets   = 10
	DefaultBucket    = time.Minute
	DefaultMaxLimits = 256
)

// Options configure a Set. Zero fields take the defaults.
type Options struct {
	// K is the number of slots of each summary: the error bound is N/K.
	K int
	// Buckets is how many whole buckets before the live one are kept:
	// the longest window is Buckets × Bucket.
	Buckets int
	// Bucket is a bucket's width.
	Bucket time.Duration
	// MaxLimits bounds the limits tracked.
	MaxLimits int
	// Hash labels values by a keyed hash instead of their text.
	Hash bool
}

func (o Options) withDefaults() Options {
	if o.K == 0 {
		o.K = DefaultK
	}
	if o.Buckets == 0 {
		o.Buckets = DefaultBuckets
	}
	if o.Bucket == 0 {
		o.Bucket = DefaultBucket
	}
	if o.MaxLimits == 0 {
		o.MaxLimits = DefaultMaxLimits
	}
	return o
}

// Validate names the first bad field.
func (o Options) Validate() error {
	switch {
	case o.K < 0 || o.K > 4096:
		return fmt.Errorf("topk: K %d (want 1 to 4096)", o.K)
	case o.Buckets < 0 || o.Buckets > 1440:
		return fmt.Errorf("topk: Buckets %d (want 1 to 1440)", o.Buckets)
	case o.Bucket < 0 || (o.Bucket > 0 && o.Bucket < time.Second):
		return fmt.Errorf("topk: Bucket %v (want at least 1s)", o.Bucket)
	case o.MaxLimits < 0:
		return fmt.Errorf("topk: MaxLimits %d (want 0 or more)", o.MaxLimits)
	}
	return nil
}

// SlotBytes is one summary slot's size, with its heap entry.
const SlotBytes = int(unsafe.Sizeof(slot{}) + unsafe.Sizeof(hent{}))

// MemoryBound is the most memory the summaries of a Set with opts can
// hold, in bytes (the bookkeeping of each limit besides: its key strings
// and a few words).
func MemoryBound(opts Options) int {
	o := opts.withDefaults()
	table := 1
	for table < 2*o.K {
		table *= 2
	}
	perSummary := o.K*SlotBytes + table*4
	return o.MaxLimits * (o.Buckets + 1) * 2 * perSummary
}

// Key names a limit: its domain, rule ID and limit label, as the
// envoy_rls_limit_decisions_total metric labels it.
type Key struct {
	Domain string `json:"domain"`
	Rule   string `json:"rule"`
	Limit  string `json:"limit"`
}

// Set is the summaries of every limit. It is safe for concurrent use.
type Set struct {
	opts   Options
	seed   maphash.Seed
	secret [32]byte
	// limits is replaced, never changed, when a limit first appears, so
	// Record reads it without a lock.
	limits  atomic.Pointer[map[Key]*limit]
	mu      sync.Mutex
	dropped atomic.Uint64
	// cache finds a limit without hashing its key: the rules give every
	// request the same rule ID and limit label strings, so the address of
	// their bytes picks an entry, and comparing a string with itself is
	// one pointer comparison. A miss (another limit there, or a reload's
	// new strings) falls back to limits.
	cache [cacheSize]atomic.Pointer[limit]
}

const cacheSize = 256

// New returns an empty Set.
func New(opts Options) (*Set, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	s := &Set{opts: opts.withDefaults(), seed: maphash.MakeSeed()}
	if _, err := rand.Read(s.secret[:]); err != nil {
		return nil, fmt.Errorf("topk: hash key: %w", err)
	}
	m := map[Key]*limit{}
	s.limits.Store(&m)
	return s, nil
}

// Options returns the options in force, defaults filled in.
func (s *Set) Options() Options { return s.opts }

// limit is one limit's ring of buckets.
type limit struct {
	key  Key
	mu   sync.Mutex
	ring []bucket
}

type bucket struct {
	// epoch is the bucket's start in units of Options.Bucket.
	epoch        int64
	seen, denied *summary
}

// Record counts one decision at now of the limit (domain, rule, limit) on
// the descriptor entries (the counter's key entries), denied or not. It
// keeps no reference to entries.
func (s *Set) Record(now time.Time, domain, rule, limit string, entries []algo.Entry, denied bool) {
	c := &s.cache[cacheIndex(rule, limit)]
	l := c.Load()
	if l == nil || l.key.Rule != rule || l.key.Limit != limit || l.key.Domain != domain {
		if l = s.limit(Key{Domain: domain, Rule: rule, Limit: limit}); l == nil {
			return
		}
		c.Store(l)
	}
	fp := s.fingerprint(entries)
	label := func(dst *[LabelBytes]byte) int { return s.label(dst, entries) }
	epoch := now.UnixNano() / int64(s.opts.Bucket)
	l.mu.Lock()
	b := &l.ring[int(uint64(epoch)%uint64(len(l.ring)))]
	if b.epoch != epoch {
		b.epoch = epoch
		b.seen.reset()
		b.denied.reset()
	}
	b.seen.add(fp, label)
	if denied {
		b.denied.add(fp, label)
	}
	l.mu.Unlock()
}

// cacheIndex picks a cache entry from the addresses of rule's and
// limit's bytes.
func cacheIndex(rule, limit string) int {
	r := uintptr(unsafe.Pointer(unsafe.StringData(rule)))
	l := uintptr(unsafe.Pointer(unsafe.StringData(limit)))
	return int((r>>4 ^ r>>12 ^ l>>3 ^ uintptr(len(rule))) % cacheSize)
}

// limit returns key's ring, made the first time, or nil when MaxLimits
// are tracked already.
func (s *Set) limit(key Key) *limit {
	if l, ok := (*s.limits.Load())[key]; ok {
		return l
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.limits.Load()
	if l, ok := old[key]; ok {
		return l
	}
	if len(old) >= s.opts.MaxLimits {
		s.dropped.Add(1)
		return nil
	}
	l := &limit{key: key, ring: make([]bucket, s.opts.Buckets+1)}
	for i := range l.ring {
		l.ring[i] = bucket{epoch: -1, seen: newSummary(s.opts.K), denied: newSummary(s.opts.K)}
	}
	m := maps.Clone(old)
	m[key] = l
	s.limits.Store(&m)
	return l
}

// fingerprint identifies a value: its entries under the Set's random seed.
// Entries that fit a stack buffer (the usual case) take one hash call.
func (s *Set) fingerprint(entries []algo.Entry) uint64 {
	var buf [256]byte
	b := buf[:0]
	for _, e := range entries {
		if len(b)+len(e.Key)+len(e.Value)+2 > len(buf) {
			return s.longFingerprint(entries)
		}
		b = append(b, e.Key...)
		b = append(b, 0)
		b = append(b, e.Value...)
		b = append(b, 0)
	}
	return maphash.Bytes(s.seed, b)
}

// longFingerprint is fingerprint for entries longer than its buffer.
func (s *Set) longFingerprint(entries []algo.Entry) uint64 {
	var h maphash.Hash
	h.SetSeed(s.seed)
	for _, e := range entries {
		_, _ = h.WriteString(e.Key)
		_ = h.WriteByte(0)
		_, _ = h.WriteString(e.Value)
		_ = h.WriteByte(0)
	}
	return h.Sum64()
}

// label writes a value's label: "key=value, key=value", or with
// Options.Hash a keyed SHA-256 of the entries.
func (s *Set) label(dst *[LabelBytes]byte, entries []algo.Entry) int {
	if s.opts.Hash {
		return s.hashLabel(dst, entries)
	}
	n := 0
	put := func(p string) bool {
		c := copy(dst[n:], p)
		n += c
		return c == len(p)
	}
	for i, e := range entries {
		if (i > 0 && !put(", ")) || !put(e.Key) || !put("=") || !put(e.Value) {
			return truncate(dst, n)
		}
	}
	return n
}

// hashLabel writes "sha256:" and 16 hex digits of SHA-256 over the Set's
// secret and the entries. Entries that fit a stack buffer (the usual
// case) are hashed without allocating.
func (s *Set) hashLabel(dst *[LabelBytes]byte, entries []algo.Entry) int {
	var buf [512]byte
	b := append(buf[:0], s.secret[:]...)
	for _, e := range entries {
		b = append(b, e.Key...)
		b = append(b, 0)
		b = append(b, e.Value...)
		b = append(b, 0)
	}
	sum := sha256.Sum256(b)
	n := copy(dst[:], "sha256:")
	return n + hex.Encode(dst[n:], sum[:8])
}

// Item is one value of a top list.
type Item struct {
	// Value is the label: the entries as "key=value, …", or their hash.
	Value string `json:"value"`
	// Count is an upper bound of the value's decisions in the window,
	// Lower a lower bound.
	Count uint64 `json:"count"`
	Lower uint64 `json:"lower"`
}

// LimitTop is one limit's top lists over a window.
type LimitTop struct {
	Key
	// Seen and Denied are the limit's decisions and denials in the
	// window, counted exactly.
	Seen   uint64 `json:"seen"`
	Denied uint64 `json:"denied"`
	// TopSeen and TopDenied are the values with the highest Count, most
	// first; SeenError and DeniedError are their error bounds (N/K).
	TopSeen     []Item `json:"top_seen"`
	TopDenied   []Item `json:"top_denied"`
	SeenError   uint64 `json:"seen_error"`
	DeniedError uint64 `json:"denied_error"`
}

// Report is every limit's top lists over one window.
type Report struct {
	// Window is the window asked for; Covers is the time the buckets read
	// can span (Window plus the live bucket).
	Window time.Duration `json:"-"`
	Covers time.Duration `json:"-"`
	K      int           `json:"k"`
	Hashed bool          `json:"hashed"`
	Limits []LimitTop    `json:"limits"`
	// Dropped counts decisions of limits beyond MaxLimits, not tracked.
	Dropped uint64 `json:"dropped"`
}

// ErrWindow is returned for a window the ring does not hold.
var ErrWindow = errors.New("topk: window")

// Top returns the n values most seen and most denied per limit over the
// window ending at now, limits with the most denials first. The window is
// rounded up to whole buckets and must not exceed Buckets × Bucket.
func (s *Set) Top(now time.Time, window time.Duration, n int) (Report, error) {
	back := int64((window + s.opts.Bucket - 1) / s.opts.Bucket)
	if window <= 0 || back > int64(s.opts.Buckets) {
		return Report{}, fmt.Errorf("%w %v: want above 0 and at most %v", ErrWindow, window, time.Duration(s.opts.Buckets)*s.opts.Bucket)
	}
	epoch := now.UnixNano() / int64(s.opts.Bucket)
	rep := Report{Window: window, Covers: time.Duration(back+1) * s.opts.Bucket, K: s.opts.K, Hashed: s.opts.Hash,
		Limits: []LimitTop{}, Dropped: s.dropped.Load()}
	for key, l := range *s.limits.Load() {
		lt := LimitTop{Key: key}
		var seen, denied merged
		l.mu.Lock()
		for i := range l.ring {
			b := &l.ring[i]
			if b.epoch > epoch || b.epoch < epoch-back {
				continue
			}
			seen.add(b.seen)
			denied.add(b.denied)
		}
		l.mu.Unlock()
		if seen.total == 0 {
			continue
		}
		lt.Seen, lt.TopSeen, lt.SeenError = seen.total, seen.top(n), seen.bound
		lt.Denied, lt.TopDenied, lt.DeniedError = denied.total, denied.top(n), denied.bound
		rep.Limits = append(rep.Limits, lt)
	}
	slices.SortFunc(rep.Limits, func(a, b LimitTop) int {
		if c := cmp.Compare(b.Denied, a.Denied); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.Domain, b.Domain), cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Limit, b.Limit))
	})
	return rep, nil
}

// merged is summaries added bucket by bucket (read side; it allocates).
type merged struct {
	items        map[uint64]*mergedItem
	total, bound uint64
	// floors is the sum of the buckets' smallest counts: what a value a
	// bucket does not hold may have had there.
	floors uint64
}

type mergedItem struct {
	label        string
	count, lower uint64
	// floors is the sum of the smallest counts of the buckets that hold
	// it: merged.floors minus this is what the others may add.
	floors uint64
}

func (m *merged) add(s *summary) {
	if s.total == 0 {
		return
	}
	if m.items == nil {
		m.items = map[uint64]*mergedItem{}
	}
	floor := s.min()
	m.floors += floor
	m.total += s.total
	m.bound += s.total / uint64(cap(s.slots))
	for i := range s.slots {
		sl := &s.slots[i]
		it := m.items[sl.fp]
		if it == nil {
			it = &mergedItem{label: string(sl.label[:sl.n])}
			m.items[sl.fp] = it
		}
		it.floors += floor
		c := s.count(i)
		it.count += c
		it.lower += c - sl.err
	}
}

// top returns the n items of highest count: each count adds the floor of
// every bucket that does not hold the item.
func (m *merged) top(n int) []Item {
	out := make([]Item, 0, len(m.items))
	for _, it := range m.items {
		c := it.count + m.floors - it.floors
		out = append(out, Item{Value: it.label, Count: c, Lower: it.lower})
	}
	slices.SortFunc(out, func(a, b Item) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(b.Lower, a.Lower), cmp.Compare(a.Value, b.Value))
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}

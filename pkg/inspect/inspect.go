// Package inspect reports what envoy-rls keeps in Redis: it walks every
// master's keys with SCAN, decodes each envoy-rls counter back to its
// domain, descriptor, algorithm and period, reads its state, TTL and
// MEMORY USAGE, and summarises them per domain and rule, by TTL, and by
// size and use.
//
// A counter is a key (redisalgo.ParseKey) for every algorithm but the
// fixed window, whose counters are the fields of per-window hashes
// (redisalgo.IsCounterHash): such a hash is walked with HSCAN and each of
// its fields is one counter (redisalgo.ParseCounter), which the report
// counts, bounds (Options.MaxKeys) and lists as it does a key, with the
// hash's TTL. The hash itself is not counted, only its fields.
//
// It only reads. It sends SCAN and HSCAN with a COUNT (never KEYS, nor
// HGETALL of a hash of unknown size), so the server never blocks for more
// than one step, and per key only GET (ZCARD and ZCOUNT for a sliding log),
// per hash HLEN, PTTL, MEMORY USAGE and, under an LFU policy, OBJECT FREQ.
// It must never send a command that writes, and it leaves keys and fields
// that are not envoy-rls's alone (they are only counted, as foreign).
package inspect

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/redisalgo"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// Masters runs fn on every master: *redis.ClusterClient's ForEachMaster,
// or a single client (see Single).
type Masters interface {
	ForEachMaster(ctx context.Context, fn func(ctx context.Context, client *redis.Client) error) error
}

// Single makes one standalone or Sentinel-managed client a Masters.
type Single struct{ Client *redis.Client }

// ForEachMaster runs fn on the one client.
func (s Single) ForEachMaster(ctx context.Context, fn func(ctx context.Context, client *redis.Client) error) error {
	return fn(ctx, s.Client)
}

// Options configures Run. The zero value scans everything with the
// defaults.
type Options struct {
	// KeyPrefix is the deployment's --redis-key-prefix.
	KeyPrefix string
	// CounterHashes is the deployment's counter-hash count, the one its
	// replicas recorded in Redis (redisalgo.ResolveCounterHashes, which
	// envoy-rls inspect uses): a fixed window's field is ours only in the
	// bucket it hashes to among that many (redisalgo.ParseCounter); 0
	// means redisalgo.DefaultCounterHashes.
	CounterHashes int
	// Count is the COUNT hint of each SCAN and HSCAN step; 0 means 100.
	// (Redis answers a small, compact hash in one step whatever the
	// COUNT; it is at most hash-max-listpack-entries fields.)
	Count int64
	// MaxKeys stops the walk after this many keys (of any owner) in all,
	// each field of a fixed window's hash counting as one key; 0 means no
	// bound. The report then says it is partial.
	MaxKeys int
	// Top is how many keys the largest and most-used lists hold; 0 means 10.
	Top int
	// Rules, when set, matches decoded keys to their rules and limits, so
	// that summaries name rules and states show what remains.
	Rules *rules.Snapshot
}

// Report is what Run found.
type Report struct {
	// Masters is the number of masters scanned.
	Masters int `json:"masters"`
	// Scanned counts every key seen, each field of a fixed window's hash
	// as one key (and the hash itself not); Ours the envoy-rls keys and
	// fields among them, Foreign the others, left alone; Unreadable those
	// of ours whose value did not decode (or changed type; a fixed
	// window's field holding anything but an integer ≥ 0).
	Scanned    int  `json:"scanned"`
	Ours       int  `json:"ours"`
	Foreign    int  `json:"foreign"`
	Unreadable int  `json:"unreadable"`
	Partial    bool `json:"partial"`
	// MemoryBytes sums MEMORY USAGE over our keys and, in their fields'
	// shares (Key.MemoryBytes), over the fixed windows' hashes.
	MemoryBytes int64 `json:"memory_bytes"`
	// LFU reports whether the servers run an LFU maxmemory policy, so that
	// TopUsed ranks by OBJECT FREQ.
	LFU     bool     `json:"lfu"`
	Domains []Group  `json:"domains"`
	Rules   []Group  `json:"rules"`
	TTL     []Bucket `json:"ttl"`
	Largest []Key    `json:"largest"`
	// TopUsed ranks by OBJECT FREQ under LFU, else by counter value.
	TopUsed []Key  `json:"top_used"`
	TopBy   string `json:"top_by"`
}

// Group sums keys and memory under one name.
type Group struct {
	Name        string `json:"name"`
	Keys        int    `json:"keys"`
	MemoryBytes int64  `json:"memory_bytes"`
}

// Bucket counts keys whose TTL is below UpTo ("" for the last bucket and
// for keys without expiry).
type Bucket struct {
	Label string `json:"label"`
	Keys  int    `json:"keys"`
}

// Key is one decoded envoy-rls counter: a key, or a field of a fixed
// window's hash.
type Key struct {
	// Name is the key, or the hash that holds Field.
	Name string `json:"name"`
	// Field is a fixed window's field in hash Name, else "".
	Field string `json:"field,omitempty"`
	// FieldDigest is the hex digest that stands for a fixed window's
	// field longer than 64 bytes (redisalgo.Key.FieldDigest): its entries
	// are then unknown, and Entries holds none of them.
	FieldDigest string  `json:"field_digest,omitempty"`
	Domain      string  `json:"domain"`
	Entries     []Entry `json:"entries"`
	HashTag     string  `json:"hash_tag,omitempty"`
	Algorithm   string  `json:"algorithm"`
	PeriodUS    int64   `json:"period_us"`
	// Rule is the matched rule's ID (with Options.Rules), else "".
	Rule string `json:"rule,omitempty"`
	// Value is the hits the counter holds: a window's count, a log's
	// entries, or for a bucket (with its rule known) the hits it must
	// refill.
	Value int64 `json:"value"`
	// Remaining is what a request would have left, with its rule known;
	// -1 when unknown.
	Remaining int64 `json:"remaining"`
	// TTLMS is the key's PTTL, or a field's hash's.
	TTLMS float64 `json:"ttl_ms"`
	// MemoryBytes is the key's MEMORY USAGE, or a field's share of its
	// hash's: the hash's divided by its HLEN (Redis does not tell one
	// field's cost).
	MemoryBytes int64 `json:"memory_bytes"`
	// Freq is the key's OBJECT FREQ, or a field's hash's, under LFU.
	Freq  int64  `json:"freq,omitempty"`
	State string `json:"state"`
}

// Entry is one descriptor entry; a digest stands for a long part as
// "#<hex>".
type Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Run walks every master of m and reports. An error on any master fails
// the walk.
func Run(ctx context.Context, m Masters, opts Options) (*Report, error) {
	if opts.Count <= 0 {
		opts.Count = 100
	}
	opts.CounterHashes = cmp.Or(opts.CounterHashes, redisalgo.DefaultCounterHashes)
	if opts.Top <= 0 {
		opts.Top = 10
	}
	w := &walk{opts: opts, domains: map[string]*Group{}, rules: map[string]*Group{}, ttl: make([]int, len(ttlBuckets)+1)}
	err := m.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		if err := w.master(ctx, c); err != nil {
			return fmt.Errorf("inspect: %s: %w", c.Options().Addr, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return w.report(), nil
}

// walk gathers what the masters' scans find; ForEachMaster runs them
// concurrently, so every update holds mu.
type walk struct {
	opts    Options
	mu      sync.Mutex
	r       Report
	domains map[string]*Group
	rules   map[string]*Group
	ttl     []int
	keys    []Key
}

// master scans one master.
func (w *walk) master(ctx context.Context, c *redis.Client) error {
	lfu, err := lfuPolicy(ctx, c)
	if err != nil {
		return err
	}
	now, err := c.Time(ctx).Result()
	if err != nil {
		return fmt.Errorf("TIME: %w", err)
	}
	w.mu.Lock()
	w.r.Masters++
	w.r.LFU = w.r.LFU || lfu
	w.mu.Unlock()
	meta := redisalgo.MetaKey(w.opts.KeyPrefix)
	var cursor uint64
	for {
		names, next, err := c.Scan(ctx, cursor, "", w.opts.Count).Result()
		if err != nil {
			return fmt.Errorf("SCAN: %w", err)
		}
		// Keys are read in one pipeline; a fixed window's hash is walked
		// field by field (hash), each field counting as a key.
		var keys, hashes []string
		for _, n := range names {
			if n == meta {
				// The deployment's record of its counter-hash count
				// (redisalgo.MetaKey): envoy-rls's, but no counter.
				continue
			}
			if redisalgo.IsCounterHash(n, w.opts.KeyPrefix) {
				hashes = append(hashes, n)
			} else {
				keys = append(keys, n)
			}
		}
		keys, stop := w.admit(keys)
		if err := w.batch(ctx, c, keys, now.UnixMicro(), lfu); err != nil {
			return err
		}
		for _, h := range hashes {
			if stop {
				// Hashes of this step left unread.
				w.setPartial()
				return nil
			}
			if stop, err = w.hash(ctx, c, h, now.UnixMicro(), lfu); err != nil {
				return err
			}
		}
		if next == 0 {
			return nil
		}
		if stop {
			w.setPartial()
			return nil
		}
		cursor = next
	}
}

// foreignKey counts one key that is not ours, met where a counter hash's
// name promised one (a hash of another type), against MaxKeys, and
// returns whether the bound is reached.
func (w *walk) foreignKey() bool {
	n, stop := w.admitN(1)
	w.mu.Lock()
	w.r.Foreign += n
	w.mu.Unlock()
	return stop
}

func (w *walk) setPartial() {
	w.mu.Lock()
	w.r.Partial = true
	w.mu.Unlock()
}

// admit counts names against MaxKeys and returns those to read, and
// whether the bound is reached.
func (w *walk) admit(names []string) ([]string, bool) {
	n, stop := w.admitN(len(names))
	return names[:n], stop
}

// admitN counts n keys (or fields) against MaxKeys and returns how many
// of them to read, and whether the bound is reached.
func (w *walk) admitN(n int) (int, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	bound := w.opts.MaxKeys
	if bound <= 0 {
		w.r.Scanned += n
		return n, false
	}
	if left := bound - w.r.Scanned; n > left {
		n = max(left, 0)
		w.r.Partial = true
	}
	w.r.Scanned += n
	return n, w.r.Scanned >= bound
}

// lfuPolicy reports whether c evicts by LFU, from INFO memory (CONFIG may
// be renamed or refused on managed servers).
func lfuPolicy(ctx context.Context, c *redis.Client) (bool, error) {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return false, fmt.Errorf("INFO memory: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "maxmemory_policy:"); ok {
			return strings.HasSuffix(v, "-lfu"), nil
		}
	}
	return false, nil
}

// read is the pipelined replies for one of our keys: value for a string
// state, logged and live (the entries of the last period) for a sliding
// log, which is counted rather than read, since it may hold as many
// entries as its limit. For a fixed window's field (hash) they are the
// field's value and its hash's replies, field naming it in hash name.
type read struct {
	key          redisalgo.Key
	name         string
	field        string
	value        *redis.StringCmd
	logged, live *redis.IntCmd
	ttl          *redis.DurationCmd
	mem          *redis.IntCmd
	freq         *redis.IntCmd
}

// batch reads one SCAN step's keys of ours in one pipeline.
func (w *walk) batch(ctx context.Context, c *redis.Client, names []string, now int64, lfu bool) error {
	pipe := c.Pipeline()
	var reads []read
	foreign := 0
	for _, n := range names {
		k, err := redisalgo.ParseKey(n, w.opts.KeyPrefix, w.opts.CounterHashes)
		if err != nil {
			foreign++
			continue
		}
		rd := read{key: k, name: n, ttl: pipe.PTTL(ctx, n), mem: pipe.MemoryUsage(ctx, n)}
		if spec, _ := k.Algorithm.Spec(); spec.Shape == algo.ShapeLog {
			after := algo.LogLiveAfter(algo.Policy{Algorithm: k.Algorithm, Period: k.Period}, now)
			rd.logged = pipe.ZCard(ctx, n)
			rd.live = pipe.ZCount(ctx, n, "("+strconv.FormatInt(after, 10), "+inf")
		} else {
			rd.value = pipe.Get(ctx, n)
		}
		if lfu {
			rd.freq = pipe.ObjectFreq(ctx, n)
		}
		reads = append(reads, rd)
	}
	if len(reads) > 0 {
		// Per-key errors (a key that expired between SCAN and the read,
		// or holds another type) are judged per key below.
		if _, err := pipe.Exec(ctx); err != nil && !isPerKey(err) {
			return fmt.Errorf("read keys: %w", err)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.r.Foreign += foreign
	for _, rd := range reads {
		w.add(rd, now)
	}
	return nil
}

// hash reads the fields of hash name, a fixed window's by its name, in
// HSCAN steps of Options.Count, each field counting against MaxKeys as a
// key does; it returns whether the bound is reached. A name of that shape
// holding another type is not ours (envoy-rls writes only hashes there)
// and counts as one foreign key; a hash gone since SCAN counts nothing.
func (w *walk) hash(ctx context.Context, c *redis.Client, name string, now int64, lfu bool) (bool, error) {
	pipe := c.Pipeline()
	size, ttl, mem := pipe.HLen(ctx, name), pipe.PTTL(ctx, name), pipe.MemoryUsage(ctx, name)
	var freq *redis.IntCmd
	if lfu {
		freq = pipe.ObjectFreq(ctx, name)
	}
	if _, err := pipe.Exec(ctx); err != nil && !isPerKey(err) {
		return false, fmt.Errorf("read hash %s: %w", name, err)
	}
	if err := size.Err(); err != nil {
		return w.foreignKey(), nil
	}
	fields := size.Val()
	if fields == 0 {
		return false, nil
	}
	// Each field's share of the hash's memory: the remainder goes one
	// byte each to the first fields, so the shares sum to the hash's.
	share, extra := mem.Val()/fields, mem.Val()%fields
	var given int64 // fields given their share so far
	// HSCAN may return a field twice (when the hash is rehashed between
	// steps); each is counted once.
	seen := map[string]bool{}
	var cursor uint64
	for {
		kv, next, err := c.HScan(ctx, name, cursor, "", w.opts.Count).Result()
		if err != nil {
			if isPerKey(err) {
				// Replaced by another type since HLEN: as above.
				return w.foreignKey(), nil
			}
			return false, fmt.Errorf("HSCAN %s: %w", name, err)
		}
		var step []string // field, value, field, value …
		for i := 0; i+1 < len(kv); i += 2 {
			if !seen[kv[i]] {
				seen[kv[i]] = true
				step = append(step, kv[i], kv[i+1])
			}
		}
		n, stop := w.admitN(len(step) / 2)
		w.mu.Lock()
		for i := range n {
			field, value := step[2*i], step[2*i+1]
			k, err := redisalgo.ParseCounter(name, field, w.opts.KeyPrefix, w.opts.CounterHashes)
			if err != nil {
				w.r.Foreign++
				continue
			}
			m := share
			if given < extra {
				m++
			}
			given++
			rd := read{key: k, name: name, field: field, value: redis.NewStringResult(value, nil),
				ttl: redis.NewDurationResult(ttl.Val(), ttl.Err()), mem: redis.NewIntResult(m, nil)}
			if freq != nil {
				rd.freq = redis.NewIntResult(freq.Val(), freq.Err())
			}
			w.add(rd, now)
		}
		w.mu.Unlock()
		if next == 0 {
			return stop, nil
		}
		if stop {
			w.setPartial()
			return true, nil
		}
		cursor = next
	}
}

// isPerKey reports whether a pipeline error is about one key's reply
// rather than the connection.
func isPerKey(err error) bool {
	var re redis.Error
	return errors.Is(err, redis.Nil) || errors.As(err, &re)
}

// add decodes one key and counts it; w.mu is held.
func (w *walk) add(rd read, now int64) {
	k := Key{
		Name: rd.name, Field: rd.field, FieldDigest: rd.key.FieldDigest,
		Domain: rd.key.Domain.String(), Algorithm: rd.key.Algorithm.String(), PeriodUS: rd.key.Period,
		Remaining: -1, MemoryBytes: rd.mem.Val(), TTLMS: ttlMillis(rd.ttl.Val()),
	}
	for i, e := range rd.key.Entries {
		k.Entries = append(k.Entries, Entry{Key: e.Key.String(), Value: e.Value.String()})
		if i == rd.key.HashTag {
			k.HashTag = e.Key.String()
		}
	}
	if rd.freq != nil {
		k.Freq = rd.freq.Val()
	}
	pol := algo.Policy{Algorithm: rd.key.Algorithm, Period: rd.key.Period, SubWindows: rd.key.SubWindows}
	ruleName := w.match(&k, rd.key, &pol)
	switch {
	case rd.logged != nil && rd.logged.Err() == nil && rd.live.Err() == nil:
		k.Value = rd.live.Val()
		k.State = fmt.Sprintf("%d logged hits, %d in the last period", rd.logged.Val(), k.Value)
		if k.Rule != "" {
			k.Remaining = max(pol.Limit-k.Value, 0)
		}
	case rd.value != nil && rd.value.Err() == nil:
		st, err := algo.DecodeState(pol, rd.value.Val())
		if err != nil || pol.KeyedWindow() && st.Count < 0 {
			// No count of ours is negative: a refund stops at 0.
			k.State = "unreadable"
			break
		}
		if pol.KeyedWindow() {
			// The key names its window; a live key's is the latest its
			// letter can name.
			st.Time = rd.key.WindowStart(now)
		}
		k.State, k.Value = describeState(pol, st, now, k.Rule != "")
		if k.Rule != "" {
			k.Remaining = algo.Peeked{State: st, Now: now}.Decision(pol).Remaining
		}
	default:
		// Expired since SCAN, or another type than its algorithm's.
		k.State = "unreadable"
	}
	if k.State == "unreadable" {
		w.r.Unreadable++
	}
	w.r.Ours++
	w.r.MemoryBytes += k.MemoryBytes
	group(w.domains, k.Domain, k.MemoryBytes)
	group(w.rules, ruleName, k.MemoryBytes)
	w.ttl[ttlBucket(k.TTLMS)]++
	w.keys = append(w.keys, k)
}

// match finds the rule and limit of k when Options.Rules is set, fills
// k.Rule and the policy's numbers, and returns the name k's rule group
// goes under: the rule's ID, else the key's shape (domain, entry keys,
// algorithm and period), which names a rule just as well without them.
func (w *walk) match(k *Key, dk redisalgo.Key, pol *algo.Policy) string {
	var keys []string
	digest := dk.Domain.Digest
	entries := make([]algo.Entry, len(dk.Entries))
	for i, e := range dk.Entries {
		keys = append(keys, e.Key.String())
		entries[i] = algo.Entry{Key: e.Key.Text, Value: e.Value.Text}
		digest = digest || e.Key.Digest || e.Value.Digest
	}
	if dk.FieldDigest != "" {
		// The entries are in the digest: the shape says so, since their
		// keys are unknown.
		keys = append(keys, "#digest")
		digest = true
	}
	shape := fmt.Sprintf("%s[%s] %s/%s", k.Domain, strings.Join(keys, ","), k.Algorithm, time.Duration(dk.Period)*time.Microsecond)
	if w.opts.Rules == nil || digest {
		return shape
	}
	r := w.opts.Rules.Match(dk.Domain.Text, entries)
	if r == nil {
		return shape + " (no rule)"
	}
	for _, l := range r.Limits {
		if l.Policy.SharesCounter(*pol) {
			*pol = l.Policy
			k.Rule = r.ID
			return r.ID
		}
	}
	return shape + " (no limit of rule " + r.ID + ")"
}

// describeState says what a state holds, and the hits it counts.
func describeState(pol algo.Policy, st algo.State, now int64, known bool) (string, int64) {
	spec, _ := pol.Algorithm.Spec()
	switch {
	case spec.Shape == algo.ShapeWindow && pol.Windows() > 1:
		return describeSubWindows(pol, st)
	case spec.Shape == algo.ShapeWindow && pol.Algorithm == algo.SlidingWindow:
		return fmt.Sprintf("window at %s: %d hits, previous %d", us(st.Time), st.Count, st.Prev), st.Count
	case spec.Shape == algo.ShapeWindow:
		return fmt.Sprintf("window at %s: %d hits", us(st.Time), st.Count), st.Count
	}
	wait := max(st.Time-now, 0)
	used := int64(0)
	if known && pol.Limit > 0 {
		// The bucket refills Limit hits per Period: what it lacks.
		used = int64(math.Ceil(float64(wait) * float64(pol.Limit) / float64(pol.Period)))
	}
	return fmt.Sprintf("full again in %s", time.Duration(wait)*time.Microsecond), used
}

func us(t int64) string { return time.UnixMicro(t).UTC().Format(time.RFC3339) }

func ttlMillis(d time.Duration) float64 {
	if d < 0 {
		return -1
	}
	return float64(d) / float64(time.Millisecond)
}

// ttlBuckets are the TTL distribution's upper bounds; keys without expiry
// (or a TTL above the last) go in the last bucket.
var ttlBuckets = []time.Duration{time.Second, 10 * time.Second, time.Minute, 10 * time.Minute, time.Hour, 24 * time.Hour}

func ttlBucket(ms float64) int {
	if ms < 0 {
		return len(ttlBuckets)
	}
	for i, b := range ttlBuckets {
		if ms < float64(b/time.Millisecond) {
			return i
		}
	}
	return len(ttlBuckets)
}

func group(m map[string]*Group, name string, mem int64) {
	g := m[name]
	if g == nil {
		g = &Group{Name: name}
		m[name] = g
	}
	g.Keys++
	g.MemoryBytes += mem
}

// report sorts what the walk found.
func (w *walk) report() *Report {
	r := w.r
	r.Domains, r.Rules = groups(w.domains), groups(w.rules)
	for i, n := range w.ttl {
		label := "no expiry or ≥ " + ttlBuckets[len(ttlBuckets)-1].String()
		if i < len(ttlBuckets) {
			label = "< " + ttlBuckets[i].String()
		}
		r.TTL = append(r.TTL, Bucket{Label: label, Keys: n})
	}
	r.Largest = top(w.keys, w.opts.Top, func(k Key) int64 { return k.MemoryBytes })
	r.TopBy = "value"
	by := func(k Key) int64 { return k.Value }
	if r.LFU {
		r.TopBy, by = "freq", func(k Key) int64 { return k.Freq }
	}
	r.TopUsed = top(w.keys, w.opts.Top, by)
	return &r
}

// groups lists m's groups, most memory first.
func groups(m map[string]*Group) []Group {
	out := make([]Group, 0, len(m))
	for _, g := range m {
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b Group) int {
		if a.MemoryBytes != b.MemoryBytes {
			return int(b.MemoryBytes - a.MemoryBytes)
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// top returns the n keys with the highest by, ties by name.
func top(keys []Key, n int, by func(Key) int64) []Key {
	out := slices.Clone(keys)
	slices.SortFunc(out, func(a, b Key) int {
		if x, y := by(a), by(b); x != y {
			if x > y {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	if len(out) > n {
		out = out[:n]
	}
	if out == nil {
		out = []Key{}
	}
	return out
}

package redisalgo

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// LayoutVersion starts every key envoy-rls writes, after the deployment's
// own prefix (Options.KeyPrefix). The version changes whenever
// the encoding or a script's state layout does, so old and new replicas
// never read each other's state: "r3" (the third layout, where fixed
// windows are fields of per-window hashes, AppendCounter) shares no key
// with "r2" (one key per counter) nor with the first layout's "rls:v1:",
// so during a rolling upgrade the versions count apart rather than
// misread each other's values, and the old keys expire on their TTL
// (docs/redis.md, "Rolling upgrades"). It is short because every key pays
// for it in Redis memory (see AppendKey).
const LayoutVersion = "r3"

// AnchorPrefix starts the key of a warm-up ramp's anchor (pkg/warmup),
// after the deployment's key prefix. A counter key has '{' where this has
// 'w', so no anchor is ever read as a counter or the other way round. It
// keeps the "r2" of the layout that introduced it: the r3 layout changed
// how counters are stored, not anchors, and a new anchor name would start
// every warm-up ramp again when replicas are upgraded.
const AnchorPrefix = "r2w"

// OverrideKey is the Redis hash of the runtime overrides (pkg/override)
// under the deployment's key prefix. Its hash tag puts the hash and its
// locks in one slot.
func OverrideKey(prefix string) string { return prefix + "envoy-rls:override:v1:{overrides}" }

// MetaKey is the Redis hash that records, per deployment (key prefix) and
// layout, what every replica and tool must agree on to name the same
// keys: the counter-hash count (field MetaCounterHashes), which is part of
// every fixed window's hash name and every hash-tagged key. It is one key
// in one slot (its hash tag, {meta}): on a Cluster it lives on one master,
// and every replica reads it there whichever masters hold counters, since
// one value is what they must share. Its name has no '{' after the layout
// version and prefix, so it is never read as a counter, and it has no
// expiry: it lives as long as the deployment's keys (Backend.Ping).
func MetaKey(prefix string) string { return prefix + "envoy-rls:layout:" + LayoutVersion + ":{meta}" }

// MetaCounterHashes is MetaKey's field that holds the deployment's
// counter-hash count (Options.CounterHashes), in decimal.
const MetaCounterHashes = "counter_hashes"

// AppendAnchorKey appends the key of a warm-up anchor to dst:
//
//	r2w{<domain>:<anchor>}
//
// where domain is escaped as in counter keys (so tools can group anchors
// by domain) and anchor is rules.Warmup.Anchor, hex digits naming the
// limit and its definition. The whole name is the hash tag: one key, one
// slot.
func AppendAnchorKey(dst []byte, domain, anchor string) []byte {
	dst = append(dst, AnchorPrefix...)
	dst = append(dst, '{')
	dst = appendPart(dst, domain)
	dst = append(dst, ':')
	dst = appendPart(dst, anchor)
	return append(dst, '}')
}

// maxPart is the longest client-supplied part (domain, entry key or value)
// kept verbatim; longer parts become a digest so keys stay bounded.
const maxPart = 64

// digestBytes is how much of the SHA-256 of a long part is kept: 128 bits
// make an accidental or crafted collision impractical.
const digestBytes = 16

// AppendKey appends the Redis key of c's limit to dst and returns the
// extended slice, for every algorithm but the fixed window, whose counter
// is a field of its window's hash (AppendCounterHash). hashes is the
// deployment's bucket count (Options.CounterHashes), which places a
// hash-tagged key. It allocates nothing when dst has room (a few hundred
// bytes cover typical descriptors).
//
// Layout, where every client-supplied part is escaped (appendPart) and
// <ap> is the algorithm's one-letter code followed by the period
// (appendPolicy):
//
//	default:  r3{<domain>:<k1>:<v1>:<k2>:<v2>:<ap>}
//	hash tag: r3{<domain>:#<n>}<kt>:<vt>:<k1>:<v1>:#:<k3>:<v3>:<ap>
//
// for example r3{perf:key:user-4480405:t1o} (token_bucket, 60 s), or, with
// the hash tag on entry 0, r3{api:#e}user:alice:#:path:/a:g2s0. In the
// hash-tag layout the tagged entry is written first, and a '#' stands in
// its place among the entries; <n> is its bucket (tagBucket) in base 36.
//
// The default tag is the limit's whole identity, so limits spread evenly over
// cluster slots while each limit's key (and anything a script derives from it
// by appending) stays in one slot. With c.HashTag ≥ 0 the tag is the domain
// plus the bucket of the entry Entries[HashTag], so every limit keyed on the
// same value of that entry shares a slot and is evaluated in one script,
// a fixed window's among them: its hash (AppendCounterHash) holds the
// counters of every tagged value of that bucket, which is what makes it
// small. The limit's numbers (Limit, Burst) are not part of the key:
// raising a limit mid-window keeps the counts. The algorithm and period
// are, because they change what the state means.
//
// Escaped parts contain none of ':', '{', '}' and '#', so the layout parses
// back uniquely: the fields between ':' are the domain, then key and value
// pairs, then <ap>, and a hash-tag key is the one with text after the '}'
// (a lone '#' there is the tagged entry). Two checks therefore share a key
// exactly when they apply to one counter (algo.SameCounter), and no value
// can close or open the hash tag.
//
// Every byte counts: Redis holds a key's name once per counter, as an
// allocation of its length plus 2 (plus 4 from 32 bytes on) rounded up to a
// jemalloc size class (16, 32, 48, 64, 80 … bytes), so a name of up to 30
// bytes costs 32 and one of 31 to 44 costs 48. The layout spends one
// separator per part and nothing else (BENCHMARKS.md has the figures).
func AppendKey(dst []byte, c algo.Check, hashes int) []byte {
	dst = append(dst, LayoutVersion...)
	if c.TagIndex() >= 0 {
		dst = appendTag(dst, c, hashes)
		dst = appendTagged(dst, c)
		dst = append(dst, ':')
		return appendPolicy(dst, c.Policy)
	}
	dst = append(dst, '{')
	dst = appendPart(dst, c.Domain)
	if len(c.Entries) > 0 {
		dst = append(dst, ':')
		dst = appendEntries(dst, c.Entries, -1)
	}
	dst = append(dst, ':')
	dst = appendPolicy(dst, c.Policy)
	return append(dst, '}')
}

// appendEntries appends entries as <k1>:<v1>:<k2>:<v2>…, entry tagged
// (when not -1) as a lone '#': it is written elsewhere, and '#' alone is
// no part (a digest is '#' and 32 hex digits), so it says where the entry
// goes in one byte.
func appendEntries(dst []byte, entries []algo.Entry, tagged int) []byte {
	for i, e := range entries {
		if i > 0 {
			dst = append(dst, ':')
		}
		if i == tagged {
			dst = append(dst, '#')
			continue
		}
		dst = appendPart(dst, e.Key)
		dst = append(dst, ':')
		dst = appendPart(dst, e.Value)
	}
	return dst
}

// appendTag appends the hash tag of hash-tagged c: "{<domain>:#<n>}".
func appendTag(dst []byte, c algo.Check, hashes int) []byte {
	dst = append(dst, '{')
	dst = appendPart(dst, c.Domain)
	dst = append(dst, ':', '#')
	dst = strconv.AppendInt(dst, tagBucket(c, hashes), 36)
	return append(dst, '}')
}

// appendTagged appends what follows a hash-tagged key's tag, but its
// policy: the tagged entry, then the entries with '#' in its place.
func appendTagged(dst []byte, c algo.Check) []byte {
	t := c.TagIndex()
	dst = appendPart(dst, c.Entries[t].Key)
	dst = append(dst, ':')
	dst = appendPart(dst, c.Entries[t].Value)
	dst = append(dst, ':')
	return appendEntries(dst, c.Entries, t)
}

// tagBucket is hash-tagged c's bucket: FNV-1a of its tagged entry's key
// and value, raw, modulo hashes. Every limit keyed on one tagged value
// gets the same bucket, and so the same slot, whatever its algorithm.
func tagBucket(c algo.Check, hashes int) int64 {
	e := c.Entries[c.TagIndex()]
	return entryBucket(e.Key, e.Value, hashes)
}

// entryBucket is the bucket of a tagged entry among hashes (tagBucket).
func entryBucket(key, value string, hashes int) int64 {
	return newFNV().add(key).addByte(0).add(value).mod(hashes)
}

// A fixed window's counter is not a key of its own but a field of a hash
// that holds the counters of one window (AppendCounterHash): Redis pays for
// a key's object, name and expiry once per hash instead of once per
// counter, and a lone hit is one HINCRBY (plain.go). BENCHMARKS.md
// ("issue 33") has the measurements this layout was chosen by.
//
//	untagged:  r3{<domain>:<ap>:<n>}<wwww>   field <k1>:<v1>:<k2>:<v2>
//	hash tag:  r3{<domain>:#<n>}<ap>:<wwww>  field <kt>:<vt>:<k1>:<v1>:#:<k3>:<v3>
//
// for example r3{perf:f1o:b}va53 with field key:user-4480405. <ap> is the
// policy (appendPolicy), <wwww> the window (appendWindow) and <n> the
// bucket in base 36 among the deployment's bucket count
// (Options.CounterHashes): for an untagged counter the hash of its field
// (bucketOf), so that one policy's counters of a window spread over that
// many hashes, and so over that many Cluster slots; for a hash-tagged one
// its tag's (tagBucket), so that it shares a slot with every other limit
// keyed on the tagged value.
//
// The field is the entries as AppendKey writes them, or, when that is
// longer than maxField, '#' and the hex of a truncated SHA-256 of it: a
// longer field would turn its whole hash from Redis's compact listpack into
// a hashtable, which costs every counter in it about three times the
// memory.

// DefaultCounterHashes is Options.CounterHashes's default: the number of
// hashes one fixed-window policy's counters of one window spread over.
// docs/redis.md ("Sizing counter hashes") has the trade-off: each hash
// costs each replica one PEXPIRE per window, and a hash should stay
// near 64 fields at the rule's peak.
const DefaultCounterHashes = 16

// MaxCounterHashes bounds Options.CounterHashes: a bucket number is at
// most three base-36 digits.
const MaxCounterHashes = 36 * 36 * 36

// maxField is the longest field kept verbatim: Redis keeps a hash compact
// (listpack) while every field and value is at most
// hash-max-listpack-value bytes, 64 by default.
const maxField = 64

// windowDigits is how many base-36 digits name a fixed window in its hash
// name (appendWindow), and windowCount how many windows they tell apart:
// 36⁴, 19 days of one-second windows. A window's hash expires a margin
// after the window's end, so its name is long gone before it comes round
// again; only a hash that lost its expiry (recreated by a hit after
// eviction; docs/redis.md, "Eviction") could be, and only after that long.
const (
	windowDigits = 4
	windowCount  = 36 * 36 * 36 * 36
)

// AppendField appends the field of c's counter in its window's hash (see
// above), digested when longer than maxField. c must be a fixed window's
// (algo.Policy.KeyedWindow).
func AppendField(dst []byte, c algo.Check) []byte {
	start := len(dst)
	if c.TagIndex() >= 0 {
		dst = appendTagged(dst, c)
	} else {
		dst = appendEntries(dst, c.Entries, -1)
	}
	if len(dst)-start > maxField {
		sum := sha256.Sum256(dst[start:])
		dst = append(dst[:start], '#')
		dst = hex.AppendEncode(dst, sum[:digestBytes])
	}
	return dst
}

// fnv is 64-bit FNV-1a, written out so that hashing a request's parts
// allocates nothing.
type fnv uint64

func newFNV() fnv { return 14695981039346656037 }

func (h fnv) add(s string) fnv {
	for i := 0; i < len(s); i++ {
		h = (h ^ fnv(s[i])) * 1099511628211
	}
	return h
}

func (h fnv) addByte(b byte) fnv { return (h ^ fnv(b)) * 1099511628211 }

// mod is h modulo hashes, 0 when hashes is at most 1.
func (h fnv) mod(hashes int) int64 {
	if hashes <= 1 {
		return 0
	}
	return int64(uint64(h) % uint64(hashes))
}

// bucketOf is the bucket of an untagged counter whose field is field,
// among hashes.
func bucketOf(field []byte, hashes int) int64 {
	h := newFNV()
	for _, b := range field {
		h = h.addByte(b)
	}
	return h.mod(hashes)
}

// AppendCounterHash appends the name of the hash that holds, at now (Unix
// µs), the counter of c whose field (AppendField) is field, with the
// deployment's hashes (Options.CounterHashes) buckets. c must be a fixed
// window's.
func AppendCounterHash(dst []byte, c algo.Check, now int64, field []byte, hashes int) []byte {
	dst = append(dst, LayoutVersion...)
	if c.TagIndex() >= 0 {
		dst = appendTag(dst, c, hashes)
		dst = appendPolicy(dst, c.Policy)
		dst = append(dst, ':')
		return appendWindow(dst, c.Policy, now)
	}
	dst = append(dst, '{')
	dst = appendPart(dst, c.Domain)
	dst = append(dst, ':')
	dst = appendPolicy(dst, c.Policy)
	dst = append(dst, ':')
	dst = strconv.AppendInt(dst, bucketOf(field, hashes), 36)
	dst = append(dst, '}')
	return appendWindow(dst, c.Policy, now)
}

// CounterAt returns where c's state is at now, after prefix: for a fixed
// window the hash and the field in it (AppendCounterHash, AppendField),
// for every other algorithm its key (AppendKey) and "". It is for tools
// and tests; the request path builds the same names without allocating
// (keyBuf).
func CounterAt(prefix string, c algo.Check, now int64, hashes int) (key, field string) {
	if !c.Policy.KeyedWindow() {
		return string(AppendKey([]byte(prefix), c, hashes)), ""
	}
	f := AppendField(nil, c)
	return string(AppendCounterHash([]byte(prefix), c, now, f, hashes)), string(f)
}

// appendWindow appends the window of policy p holding now: its index
// modulo windowCount in windowDigits base-36 digits (zero-padded); for a
// period that is not positive (such a policy blocks every hit and stores
// nothing), "0000".
func appendWindow(dst []byte, p algo.Policy, now int64) []byte {
	w := windowOf(p.Period, now)
	var d [windowDigits]byte
	for i := windowDigits - 1; i >= 0; i-- {
		d[i] = digits36[w%36]
		w /= 36
	}
	return append(dst, d[:]...)
}

const digits36 = "0123456789abcdefghijklmnopqrstuvwxyz"

// windowOf is the index modulo windowCount of the window of period
// holding now: 0 for a period that is not positive.
func windowOf(period, now int64) int64 {
	if period <= 0 {
		return 0
	}
	_, r := divmod(algo.WindowIndex(now, period), windowCount)
	return r
}

// divmod is floor division and its non-negative remainder.
func divmod(a, b int64) (q, r int64) {
	q, r = a/b, a%b
	if r < 0 {
		q, r = q-1, r+b
	}
	return q, r
}

// appendPolicy appends what of p names the counter: the algorithm's letter
// (algo.Spec.Letter, part of the key layout: changing one needs a new
// LayoutVersion), then the period in base 36, in seconds when it is whole
// (every period the rules can express is), else '.' and the microseconds,
// then for a
// sliding_window in N ≥ 2 sub-windows '/' and N (appendSubWindows): its
// state means something else, so it never shares a key with the
// two-window estimate's. The letter has a fixed length, so the period
// starts right after it.
func appendPolicy(dst []byte, p algo.Policy) []byte {
	if spec, ok := p.Algorithm.Spec(); ok {
		dst = append(dst, spec.Letter)
	} else {
		a := p.Algorithm
		// Validated policies never get here; 'x' and two hex digits keep
		// it allocation free and distinct from every letter.
		dst = append(dst, 'x', hexDigits[a>>4], hexDigits[a&0x0f])
	}
	if p.Period%algo.Second == 0 {
		dst = strconv.AppendInt(dst, p.Period/algo.Second, 36)
	} else {
		dst = append(dst, '.')
		dst = strconv.AppendInt(dst, p.Period, 36)
	}
	return appendSubWindows(dst, p)
}

// mustEscape marks bytes that appendPart percent-encodes: the layout's
// separator, the escape and digest markers, hash-tag braces, the
// backslash, space and control bytes (so keys print safely in redis-cli).
var mustEscape = func() (m [256]bool) {
	for b := range 0x21 {
		m[b] = true
	}
	m[0x7f] = true
	for _, b := range []byte("{}:\\%#") {
		m[b] = true
	}
	return m
}()

const hexDigits = "0123456789ABCDEF"

// appendPart appends one client-supplied part: percent-encoded when at most
// maxPart bytes long, otherwise '#' and the hex of a truncated SHA-256. '#'
// is always escaped in verbatim parts, so a digest never equals a value.
func appendPart(dst []byte, s string) []byte {
	if len(s) > maxPart {
		sum := sha256.Sum256(stringBytes(s))
		dst = append(dst, '#')
		return hex.AppendEncode(dst, sum[:digestBytes])
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if mustEscape[b] {
			dst = append(dst, '%', hexDigits[b>>4], hexDigits[b&0x0f])
			continue
		}
		dst = append(dst, b)
	}
	return dst
}

// slotCount is the number of Redis Cluster hash slots.
const slotCount = 16384

// SlotCount is the number of Redis Cluster hash slots.
const SlotCount = slotCount

// KeySlot returns the Redis Cluster hash slot of key (see keySlot), for
// tools that model where keys land.
func KeySlot(key []byte) int { return keySlot(key) }

// keySlot returns the Redis Cluster hash slot of key, by Redis's rule: when
// the key has a '{' followed later by a '}' with at least one byte between
// them, only the bytes between the first '{' and the first '}' after it are
// hashed; otherwise the whole key is.
func keySlot(key []byte) int {
	for i, b := range key {
		if b != '{' {
			continue
		}
		for j := i + 1; j < len(key); j++ {
			if key[j] == '}' {
				if j > i+1 {
					key = key[i+1 : j]
				}
				return int(crc16(key) % slotCount)
			}
		}
		break
	}
	return int(crc16(key) % slotCount)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial 0), the checksum
// Redis Cluster uses for key slots.
func crc16(data []byte) uint16 {
	var crc uint16
	for _, b := range data {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^b]
	}
	return crc
}

var crc16Table = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()

// Part is one client-supplied part of a key read back by ParseKey: the
// original text, or, for a part longer than 64 bytes, the hex digest that
// stands in for it.
type Part struct {
	Text   string
	Digest bool
}

// String returns the text, or "#<hex>" for a digest.
func (p Part) String() string {
	if p.Digest {
		return "#" + p.Text
	}
	return p.Text
}

// KeyEntry is one descriptor entry read back from a key.
type KeyEntry struct{ Key, Value Part }

// Key is what a key names, read back from its name by ParseKey (or, for a
// fixed window, from its hash and field by ParseCounter): AppendKey's
// arguments, but for the numbers a key leaves out (Limit, Burst) and the
// text of the parts replaced by their digest.
type Key struct {
	Domain  Part
	Entries []KeyEntry
	// HashTag is the index of the entry that is the key's hash tag, or -1.
	HashTag   int
	Algorithm algo.Algorithm
	// Period is in µs.
	Period int64
	// SubWindows is a sliding_window's sub-window count when above 1,
	// else 0 (algo.Policy.SubWindows).
	SubWindows int64
	// Window is what a fixed window's hash name says (appendWindow): the
	// index of the window it counts modulo 36⁴; 0 for other algorithms.
	Window int64
	// Bucket is an untagged fixed window's hash number (bucketOf), else 0.
	Bucket int64
	// FieldDigest is, for a fixed window whose field was longer than 64
	// bytes, the hex digest that stands for it (AppendField); Entries is
	// then empty and HashTag -1, since every entry is in the digest.
	FieldDigest string
}

// WindowStart is the start (Unix µs) of the latest window at or before now
// that k, a fixed window's counter, can name: the window it counts when
// its state is alive at now (a window's hash expires windowMargin after
// the window's end, long before its name comes round).
func (k Key) WindowStart(now int64) int64 {
	if k.Period <= 0 {
		return 0
	}
	i := algo.WindowIndex(now, k.Period)
	_, r := divmod(i-k.Window, windowCount)
	if i-r < math.MinInt64/k.Period {
		// The window of that name before now starts before the first µs
		// an int64 holds (a period of many days): the one it names is
		// window k.Window itself, after now.
		return k.Window * k.Period
	}
	return (i - r) * k.Period
}

// ErrNotOurs is wrapped by ParseKey's errors: the name is not one that
// AppendKey (after the deployment's prefix) writes.
var ErrNotOurs = errors.New("not an envoy-rls key")

// ErrCounterHash is wrapped by ParseKey's error for the name of a hash of
// fixed-window counters: read its fields with ParseCounter.
var ErrCounterHash = errors.New("a hash of fixed-window counters")

// ParseKey reads a key name back into what it names: the inverse of
// AppendKey after prefix (Options.KeyPrefix) with hashes buckets
// (Options.CounterHashes). It accepts only the one spelling AppendKey
// writes, so every name it accepts names one counter, and it accepts every
// name AppendKey writes (the key tests and a fuzz target hold both
// directions). A hash-tagged key's bucket is checked against its tagged
// entry only when hashes is positive (a tool that does not know the
// deployment's count passes 0). Every name it refuses gets an error
// wrapping ErrNotOurs that says why; one with the shape of a fixed
// window's hash (AppendCounterHash, IsCounterHash) also wraps
// ErrCounterHash.
func ParseKey(name, prefix string, hashes int) (Key, error) {
	if IsCounterHash(name, prefix) {
		// Not a key: ErrNotOurs as for any name ParseKey refuses, and
		// ErrCounterHash for a caller that wants to read it another way.
		return Key{HashTag: -1}, fmt.Errorf("redisalgo: %w: %q has the shape of %w: read its fields with ParseCounter", ErrNotOurs, name, ErrCounterHash)
	}
	k, err := parseKey(name, prefix)
	switch {
	case err != nil:
	case k.Algorithm == algo.FixedWindow:
		err = errors.New("a fixed window's state is a field of a hash, not a key")
	case k.HashTag >= 0 && hashes > 0:
		err = k.checkTagBucket(hashes)
	}
	if err != nil {
		return Key{HashTag: -1}, fmt.Errorf("redisalgo: %w: %w", ErrNotOurs, err)
	}
	return k, nil
}

// IsCounterHash reports whether name, after prefix, has the shape of a
// fixed window's hash (AppendCounterHash): text after the hash tag that
// is a fixed window's policy and a window, or a window alone. It decides
// which parser a name goes to; ParseCounter checks the rest.
func IsCounterHash(name, prefix string) bool {
	rest, ok := strings.CutPrefix(name, prefix+LayoutVersion+"{")
	if !ok {
		return false
	}
	_, after, ok := strings.Cut(rest, "}")
	if !ok {
		return false
	}
	if isWindow(after) {
		return true
	}
	ap, w, ok := strings.Cut(after, ":")
	return ok && isWindow(w) && strings.HasPrefix(ap, string(fixedWindowLetter()))
}

// fixedWindowLetter is the fixed window's algorithm letter in names.
func fixedWindowLetter() byte {
	s, _ := algo.FixedWindow.Spec()
	return s.Letter
}

// isWindow reports whether s is a window as appendWindow writes it.
func isWindow(s string) bool {
	if len(s) != windowDigits {
		return false
	}
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(digits36, s[i]) < 0 {
			return false
		}
	}
	return true
}

// ParseCounter reads a fixed window's counter back from the name of its
// hash and its field: the inverse of AppendCounterHash and AppendField
// after prefix. Like ParseKey it accepts exactly what they write, and
// refuses anything else with an error wrapping ErrNotOurs that says why.
// The bucket is checked against the field only when hashes is positive
// (the deployment's Options.CounterHashes; a tool that does not know it
// passes 0).
func ParseCounter(hash, field, prefix string, hashes int) (Key, error) {
	k, err := parseCounter(hash, field, prefix, hashes)
	if err != nil {
		return Key{HashTag: -1}, fmt.Errorf("redisalgo: %w: %w", ErrNotOurs, err)
	}
	return k, nil
}

func parseCounter(hash, field, prefix string, hashes int) (Key, error) {
	k := Key{HashTag: -1}
	if !IsCounterHash(hash, prefix) {
		return k, fmt.Errorf("%q is no fixed window's hash (want %s{<domain>:<policy>:<bucket>}<window> or %s{<domain>:#<bucket>}<policy>:<window>)", hash, prefix+LayoutVersion, prefix+LayoutVersion)
	}
	if strings.IndexByte(hash, '{') != len(prefix)+len(LayoutVersion) {
		return k, errors.New("the first '{' is not the hash tag's")
	}
	rest := hash[len(prefix)+len(LayoutVersion)+1:]
	tag, after, _ := strings.Cut(rest, "}")
	f := strings.Split(tag, ":")
	var err error
	if k.Domain, err = parsePart(f[0]); err != nil {
		return k, fmt.Errorf("domain: %w", err)
	}
	var window, bucket string
	tagged := !isWindow(after)
	if tagged {
		if len(f) != 2 || !strings.HasPrefix(f[1], "#") {
			return k, fmt.Errorf("hash tag %q (want the domain and '#' and the bucket)", tag)
		}
		var ap string
		ap, window, _ = strings.Cut(after, ":")
		if err := k.parsePolicy(ap); err != nil {
			return k, err
		}
		bucket = f[1][1:]
	} else {
		if len(f) != 3 {
			return k, fmt.Errorf("%d fields in the hash tag (want the domain, the policy and the bucket)", len(f))
		}
		if err := k.parsePolicy(f[1]); err != nil {
			return k, err
		}
		bucket, window = f[2], after
	}
	if k.Bucket, err = parseBucket(bucket); err != nil {
		return k, err
	}
	if k.Algorithm != algo.FixedWindow {
		return k, fmt.Errorf("a %s policy in a fixed window's hash name", k.Algorithm)
	}
	w, _ := strconv.ParseInt(window, 36, 64)
	switch {
	case k.Period <= 0 && w != 0:
		return k, fmt.Errorf("window %q for a period of %dµs (want \"0000\")", window, k.Period)
	case k.Period > 0 && w > math.MaxInt64/k.Period:
		// AppendCounterHash never names a window that starts after the
		// last µs an int64 holds.
		return k, fmt.Errorf("window %q of a period of %dµs starts beyond any time", window, k.Period)
	}
	k.Window = w
	if err := k.parseField(field, tagged); err != nil {
		return k, fmt.Errorf("field %q: %w", field, err)
	}
	if hashes <= 0 || k.FieldDigest != "" && tagged {
		// The bucket cannot be checked: the count is unknown, or the
		// tagged entry is in the digest.
		return k, nil
	}
	if tagged {
		return k, k.checkTagBucket(hashes)
	}
	if want := bucketOf([]byte(field), hashes); want != k.Bucket {
		return k, fmt.Errorf("the counter belongs in bucket %s of %d, not %s", strconv.FormatInt(want, 36), hashes, bucket)
	}
	return k, nil
}

// checkTagBucket fails unless hash-tagged k's bucket is its tagged
// entry's among hashes (tagBucket); a digested part hides the entry, so
// it passes.
func (k *Key) checkTagBucket(hashes int) error {
	e := k.Entries[k.HashTag]
	if e.Key.Digest || e.Value.Digest {
		return nil
	}
	if want := entryBucket(e.Key.Text, e.Value.Text, hashes); want != k.Bucket {
		return fmt.Errorf("the tagged entry belongs in bucket %s of %d, not %s", strconv.FormatInt(want, 36), hashes, strconv.FormatInt(k.Bucket, 36))
	}
	return nil
}

// parseBucket reads a bucket number as the names write it.
func parseBucket(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 36, 64)
	if err != nil || strconv.FormatInt(n, 36) != s || n >= MaxCounterHashes {
		return 0, fmt.Errorf("bad bucket %q (want base 36 below %d)", s, MaxCounterHashes)
	}
	return n, nil
}

// parseField reads a fixed window's field (AppendField) into k's entries.
func (k *Key) parseField(field string, tagged bool) error {
	if d, ok := strings.CutPrefix(field, "#"); ok && len(d) == 2*digestBytes && !strings.Contains(d, ":") {
		if strings.Trim(d, "0123456789abcdef") != "" {
			return fmt.Errorf("bad digest (want '#' and %d lowercase hex digits)", 2*digestBytes)
		}
		k.FieldDigest = d
		return nil
	}
	if len(field) > maxField {
		return fmt.Errorf("%d bytes stored as is (AppendField writes a field over %d bytes as its digest)", len(field), maxField)
	}
	if tagged {
		return k.parseTaggedEntries(strings.Split(field, ":"))
	}
	if field == "" {
		return nil
	}
	f := strings.Split(field, ":")
	if len(f)%2 != 0 {
		return fmt.Errorf("%d fields (want key and value pairs)", len(f))
	}
	return k.appendPairs(f)
}

func parseKey(name, prefix string) (Key, error) {
	k := Key{HashTag: -1}
	rest, ok := strings.CutPrefix(name, prefix+LayoutVersion+"{")
	if !ok {
		return k, fmt.Errorf("no %q prefix", prefix+LayoutVersion+"{")
	}
	if strings.IndexByte(name, '{') != len(prefix)+len(LayoutVersion) {
		return k, errors.New("the first '{' is not the hash tag's")
	}
	// Split where Redis does: at the first '}' after the first '{'.
	tag, after, ok := strings.Cut(rest, "}")
	if !ok || tag == "" {
		return k, errors.New("no hash tag")
	}
	if after == "" {
		return k, k.parseDefault(strings.Split(tag, ":"))
	}
	return k, k.parseTagged(strings.Split(tag, ":"), strings.Split(after, ":"))
}

// parseDefault reads the fields of r3{<domain>:<k1>:<v1>…:<ap>}.
func (k *Key) parseDefault(f []string) error {
	if len(f) < 2 || len(f)%2 != 0 {
		return fmt.Errorf("%d fields in the hash tag (want the domain, key and value pairs, and the policy)", len(f))
	}
	var err error
	if k.Domain, err = parsePart(f[0]); err != nil {
		return fmt.Errorf("domain: %w", err)
	}
	last := len(f) - 1
	if err := k.appendPairs(f[1:last]); err != nil {
		return err
	}
	return k.parsePolicy(f[last])
}

// parseTagged reads r3{<domain>:#<n>}<kt>:<vt>:<k1>:<v1>:#:…:<ap>.
func (k *Key) parseTagged(tag, f []string) error {
	if len(tag) != 2 || !strings.HasPrefix(tag[1], "#") {
		return fmt.Errorf("hash tag %q (want the domain and '#' and the bucket)", strings.Join(tag, ":"))
	}
	var err error
	if k.Domain, err = parsePart(tag[0]); err != nil {
		return fmt.Errorf("domain: %w", err)
	}
	if k.Bucket, err = parseBucket(tag[1][1:]); err != nil {
		return err
	}
	if len(f) < 2 {
		return errors.New("no policy after the tagged entries")
	}
	if err := k.parseTaggedEntries(f[:len(f)-1]); err != nil {
		return err
	}
	return k.parsePolicy(f[len(f)-1])
}

// parseTaggedEntries reads <kt>:<vt>:<k1>:<v1>:#:…, the entries of a
// hash-tagged counter (appendTagged), split at ':'.
func (k *Key) parseTaggedEntries(f []string) error {
	if len(f) < 3 {
		return errors.New("no tagged entry and '#'")
	}
	tagged, err := parseEntry(f[0], f[1])
	if err != nil {
		return fmt.Errorf("tagged entry: %w", err)
	}
	for i := 2; i < len(f); i++ {
		if f[i] == "#" {
			if k.HashTag >= 0 {
				return errors.New("two '#' fields")
			}
			k.HashTag = len(k.Entries)
			k.Entries = append(k.Entries, tagged)
			continue
		}
		if i+1 >= len(f) {
			return fmt.Errorf("entry key %q has no value", f[i])
		}
		if err := k.appendEntry(f[i], f[i+1]); err != nil {
			return err
		}
		i++
	}
	if k.HashTag < 0 {
		return errors.New("no '#' field marks the tagged entry")
	}
	return nil
}

// appendPairs appends the entries of f, key and value pairs (an even
// count, which the caller checked).
func (k *Key) appendPairs(f []string) error {
	for i := 0; i+1 < len(f); i += 2 {
		if err := k.appendEntry(f[i], f[i+1]); err != nil {
			return err
		}
	}
	return nil
}

func (k *Key) appendEntry(key, value string) error {
	e, err := parseEntry(key, value)
	if err != nil {
		return fmt.Errorf("entry %d: %w", len(k.Entries), err)
	}
	k.Entries = append(k.Entries, e)
	return nil
}

func parseEntry(key, value string) (KeyEntry, error) {
	k, err := parsePart(key)
	if err != nil {
		return KeyEntry{}, fmt.Errorf("key: %w", err)
	}
	v, err := parsePart(value)
	if err != nil {
		return KeyEntry{}, fmt.Errorf("value: %w", err)
	}
	return KeyEntry{Key: k, Value: v}, nil
}

// parsePart is the inverse of appendPart. It refuses what appendPart would
// not write: an unescaped byte of mustEscape, a needless or lowercase
// escape, a digest not in lowercase hex, a verbatim part over maxPart bytes.
func parsePart(s string) (Part, error) {
	if d, ok := strings.CutPrefix(s, "#"); ok {
		if len(d) != 2*digestBytes || strings.Trim(d, "0123456789abcdef") != "" {
			return Part{}, fmt.Errorf("bad digest %q (want '#' and %d lowercase hex digits)", s, 2*digestBytes)
		}
		return Part{Text: d, Digest: true}, nil
	}
	var b []byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			if mustEscape[c] {
				return Part{}, fmt.Errorf("unescaped byte %#x in %q", c, s)
			}
			b = append(b, c)
			continue
		}
		if i+2 >= len(s) {
			return Part{}, fmt.Errorf("truncated escape in %q", s)
		}
		hi, lo := strings.IndexByte(hexDigits, s[i+1]), strings.IndexByte(hexDigits, s[i+2])
		if hi < 0 || lo < 0 {
			return Part{}, fmt.Errorf("bad escape %q in %q (want %% and two uppercase hex digits)", s[i:i+3], s)
		}
		v := byte(hi<<4 | lo)
		if !mustEscape[v] {
			return Part{}, fmt.Errorf("needless escape of %#x in %q", v, s)
		}
		b = append(b, v)
		i += 2
	}
	if len(b) > maxPart {
		return Part{}, fmt.Errorf("%d-byte part %q stored as is (appendPart writes a part over %d bytes as its digest)", len(b), s, maxPart)
	}
	return Part{Text: string(b)}, nil
}

// parsePolicy is the inverse of appendPolicy: the algorithm's letter (or
// 'x' and its number in uppercase hex for one without a letter), then the
// period in base 36, in seconds or after a '.' in µs.
func (k *Key) parsePolicy(s string) error {
	if s == "" {
		return errors.New("no algorithm and period")
	}
	if s[0] == 'x' {
		hi, lo := -1, -1
		if len(s) >= 3 {
			hi, lo = strings.IndexByte(hexDigits, s[1]), strings.IndexByte(hexDigits, s[2])
		}
		a := algo.Algorithm(hi<<4 | lo)
		if _, known := a.Spec(); hi < 0 || lo < 0 || known {
			return fmt.Errorf("bad algorithm number in %q", s)
		}
		k.Algorithm, s = a, s[3:]
	} else {
		a, ok := algo.ByLetter(s[0])
		if !ok {
			return fmt.Errorf("unknown algorithm letter in %q", s)
		}
		k.Algorithm, s = a, s[1:]
	}
	s, n, err := cutSubWindows(s)
	if err != nil {
		return err
	}
	if n > 1 && k.Algorithm != algo.SlidingWindow {
		return fmt.Errorf("sub-windows for algorithm %s in %q", k.Algorithm, s)
	}
	if n > 1 {
		k.SubWindows = n
	}
	us, micro := strings.CutPrefix(s, ".")
	v, err := strconv.ParseInt(us, 36, 64)
	if err != nil || strconv.FormatInt(v, 36) != us {
		return fmt.Errorf("bad period %q", s)
	}
	switch {
	case !micro && (v > math.MaxInt64/algo.Second || v < math.MinInt64/algo.Second):
		return fmt.Errorf("period %q overflows", s)
	case !micro:
		v *= algo.Second
	case v%algo.Second == 0:
		return fmt.Errorf("whole seconds %q spelt in µs", s)
	}
	k.Period = v
	return nil
}

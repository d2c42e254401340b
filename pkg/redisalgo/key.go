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
// never read each other's state: "r2" (the second layout) shares no prefix
// with the first layout's "rls:v1:", so during a rolling upgrade the two
// versions count apart rather than misread each other's values, and the old
// keys expire on their TTL. It is short because every key pays for it in
// Redis memory (see AppendKey).
const LayoutVersion = "r2"

// AnchorPrefix starts the key of a warm-up ramp's anchor (pkg/warmup),
// after the deployment's key prefix. A counter key has '{' where this has
// 'w', so no anchor is ever read as a counter or the other way round.
const AnchorPrefix = LayoutVersion + "w"

// OverrideKey is the Redis hash of the runtime overrides (pkg/override)
// under the deployment's key prefix. Its hash tag puts the hash and its
// locks in one slot.
func OverrideKey(prefix string) string { return prefix + "envoy-rls:override:v1:{overrides}" }

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
// extended slice. It allocates nothing when dst has room (a few hundred bytes
// cover typical descriptors).
//
// Layout, where every client-supplied part is escaped (appendPart) and
// <ap> is the algorithm's one-letter code followed by the period
// (appendPolicy):
//
//	default:  r2{<domain>:<k1>:<v1>:<k2>:<v2>:<ap>}
//	hash tag: r2{<domain>:<kt>:<vt>}<k1>:<v1>:#:<k3>:<v3>:<ap>
//
// for example r2{perf:key:user-4480405:f1o} (fixed_window, 60 s), or, with
// the hash tag on entry 0, r2{api:user:alice}#:path:/a:g2s0. In the
// hash-tag layout the tagged entry is written once, in the tag, and a '#'
// stands in its place among the entries (the second above, the first in
// the example).
//
// The default tag is the limit's whole identity, so limits spread evenly over
// cluster slots while each limit's key (and anything a script derives from it
// by appending) stays in one slot. With c.HashTag ≥ 0 the tag is the domain
// plus the entry Entries[HashTag], so every limit keyed on the same value of
// that entry shares a slot and is evaluated in one script. The limit's
// numbers (Limit, Burst) are not part of the key: raising a limit mid-window
// keeps the counts. The algorithm and period are, because they change what
// the state means.
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
func AppendKey(dst []byte, c algo.Check) []byte {
	dst = append(dst, LayoutVersion...)
	dst = append(dst, '{')
	dst = appendPart(dst, c.Domain)
	if t := c.TagIndex(); t >= 0 {
		e := c.Entries[t]
		dst = append(dst, ':')
		dst = appendPart(dst, e.Key)
		dst = append(dst, ':')
		dst = appendPart(dst, e.Value)
		dst = append(dst, '}')
		for i, e := range c.Entries {
			if i == t {
				// The tag holds this entry already; '#' alone is no
				// part (a digest is '#' and 32 hex digits), so it says
				// where the entry goes in one byte.
				dst = append(dst, '#', ':')
				continue
			}
			dst = appendPart(dst, e.Key)
			dst = append(dst, ':')
			dst = appendPart(dst, e.Value)
			dst = append(dst, ':')
		}
		return appendPolicy(dst, c.Policy)
	}
	for _, e := range c.Entries {
		dst = append(dst, ':')
		dst = appendPart(dst, e.Key)
		dst = append(dst, ':')
		dst = appendPart(dst, e.Value)
	}
	dst = append(dst, ':')
	dst = appendPolicy(dst, c.Policy)
	return append(dst, '}')
}

// windowLetters is how many windows a fixed_window's key tells apart: its
// last two bytes are the window's index modulo windowLetters, as two
// uppercase letters (AppendKeyAt).
const windowLetters = 26 * 26

// AppendKeyAt appends the key that holds c's state at now (Unix µs): the
// limit's key (AppendKey), then for a fixed_window (algo.Policy.KeyedWindow)
// two uppercase letters naming the window that holds now, its index modulo
// 676 in base 26 ('A' = 0), so that each window has a key of its own whose
// value is the count alone:
//
//	r2{perf:key:user-4480405:f1o}QK
//	r2{api:user:alice}#:path:/a:f1oBC
//
// Redis's INCRBY and PEXPIRE then apply a lone hit exactly (plain calls,
// plain.go). A window's key expires windowMargin (at most 5 s) after the
// window's end, so by the time
// its letters come round again, 676 windows later (11 minutes at a period
// of a second), the key they named is long gone; only a key whose expiry
// was never set (an INCRBY whose PEXPIRE, sent in the same write, never
// ran) could be read again, and its count then only denies, for one
// window, after which the PEXPIRE of that window's first call expires it.
// Two bytes keep the name no longer than envoyproxy/ratelimit's, whose
// names carry the window's start in seconds (TestKeyNameMemory); the
// letters follow the policy field, whose period is lowercase base 36, or
// the hash tag's '}', so they parse back uniquely and leave the hash tag,
// and so the slot, unchanged.
func AppendKeyAt(dst []byte, c algo.Check, now int64) []byte {
	dst = AppendKey(dst, c)
	return appendWindow(dst, c.Policy, now)
}

// appendWindow appends the window letters of AppendKeyAt for policy p at
// now: nothing unless p.KeyedWindow().
func appendWindow(dst []byte, p algo.Policy, now int64) []byte {
	if !p.KeyedWindow() {
		return dst
	}
	w := windowOf(p.Period, now)
	return append(dst, byte('A'+w/26), byte('A'+w%26))
}

// windowOf is the index modulo windowLetters of the window of period
// holding now: 0 for a period that is not positive (such a policy blocks
// every hit and stores nothing).
func windowOf(period, now int64) int64 {
	if period <= 0 {
		return 0
	}
	_, r := divmod(algo.WindowIndex(now, period), windowLetters)
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

// Key is what a key names, read back from its name by ParseKey: AppendKey's
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
	// Window is what a fixed_window key's letters say (AppendKeyAt): the
	// index of the window it counts modulo 676; 0 for other algorithms.
	Window int64
}

// WindowStart is the start (Unix µs) of the latest window at or before now
// that k, a fixed_window's key, can name: the window it counts when its
// state is alive at now (a window's key expires windowMargin after the
// window's end, long before its letters come round).
func (k Key) WindowStart(now int64) int64 {
	if k.Period <= 0 {
		return 0
	}
	i := algo.WindowIndex(now, k.Period)
	_, r := divmod(i-k.Window, windowLetters)
	return (i - r) * k.Period
}

// ErrNotOurs is wrapped by ParseKey's errors: the name is not one that
// AppendKey (after the deployment's prefix) writes.
var ErrNotOurs = errors.New("not an envoy-rls key")

// ParseKey reads a key name back into what it names: the inverse of
// AppendKeyAt after prefix (Options.KeyPrefix): a fixed_window's key
// must end in its window's letters, no other key may. It accepts only the one
// spelling AppendKey writes, so every name it accepts names one counter,
// and it accepts every name AppendKey writes (the key tests and a fuzz
// target hold both directions). Any other name is refused with an error
// wrapping ErrNotOurs that says why.
func ParseKey(name, prefix string) (Key, error) {
	k, err := parseKey(name, prefix)
	if err != nil {
		return Key{HashTag: -1}, fmt.Errorf("redisalgo: %w: %w", ErrNotOurs, err)
	}
	return k, nil
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
	rest, window, windowed := cutWindow(rest)
	// Split where Redis does: at the first '}' after the first '{'.
	tag, after, ok := strings.Cut(rest, "}")
	if !ok || tag == "" {
		return k, errors.New("no hash tag")
	}
	var err error
	if after == "" {
		err = k.parseDefault(strings.Split(tag, ":"))
	} else {
		err = k.parseTagged(strings.Split(tag, ":"), strings.Split(after, ":"))
	}
	if err != nil {
		return k, err
	}
	keyed := algo.Policy{Algorithm: k.Algorithm}.KeyedWindow()
	switch {
	case keyed && !windowed:
		return k, fmt.Errorf("no window letters end the %s key", k.Algorithm)
	case !keyed && windowed:
		return k, fmt.Errorf("window letters %q end a %s key", window, k.Algorithm)
	case keyed && k.Period <= 0 && window != "AA":
		return k, fmt.Errorf("window letters %q for a period of %dµs (want \"AA\")", window, k.Period)
	}
	if keyed {
		k.Window = int64(window[0]-'A')*26 + int64(window[1]-'A')
	}
	return k, nil
}

// cutWindow cuts a fixed_window's window letters (appendWindow) off a key
// name: two last bytes 'A'-'Z' that follow the policy field (in the
// hash-tag layout; the field is lowercase base 36 with '.' and '/') or the
// hash tag's '}' (in the default layout; text after '}' without ':' is
// nothing else).
func cutWindow(name string) (rest, window string, ok bool) {
	n := len(name)
	upper := func(b byte) bool { return b >= 'A' && b <= 'Z' }
	if n < 3 || !upper(name[n-1]) || !upper(name[n-2]) {
		return name, "", false
	}
	if name[n-3] == '}' || strings.LastIndexByte(name, ':') > strings.LastIndexByte(name, '}') {
		return name[:n-2], name[n-2:], true
	}
	return name, "", false
}

// parseDefault reads the fields of r2{<domain>:<k1>:<v1>…:<ap>}.
func (k *Key) parseDefault(f []string) error {
	if len(f) < 2 || len(f)%2 != 0 {
		return fmt.Errorf("%d fields in the hash tag (want the domain, key and value pairs, and the policy)", len(f))
	}
	var err error
	if k.Domain, err = parsePart(f[0]); err != nil {
		return fmt.Errorf("domain: %w", err)
	}
	last := len(f) - 1
	for i := 1; i < last; i += 2 {
		if err := k.appendEntry(f[i], f[i+1]); err != nil {
			return err
		}
	}
	return k.parsePolicy(f[last])
}

// parseTagged reads r2{<domain>:<kt>:<vt>}<k1>:<v1>:#:…:<ap>.
func (k *Key) parseTagged(tag, f []string) error {
	if len(tag) != 3 {
		return fmt.Errorf("%d fields in the hash tag (want the domain and the tagged entry)", len(tag))
	}
	var err error
	if k.Domain, err = parsePart(tag[0]); err != nil {
		return fmt.Errorf("domain: %w", err)
	}
	tagged, err := parseEntry(tag[1], tag[2])
	if err != nil {
		return fmt.Errorf("tagged entry: %w", err)
	}
	last := len(f) - 1
	for i := 0; i < last; i++ {
		if f[i] == "#" {
			if k.HashTag >= 0 {
				return errors.New("two '#' fields after the hash tag")
			}
			k.HashTag = len(k.Entries)
			k.Entries = append(k.Entries, tagged)
			continue
		}
		if i+1 >= last {
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
	return k.parsePolicy(f[last])
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

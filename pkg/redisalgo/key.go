package redisalgo

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"unsafe"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// KeyPrefix starts every key envoy-rls writes. The version changes whenever
// the encoding or a script's state layout does, so old and new replicas
// never read each other's state: "r2" (the second layout) shares no prefix
// with the first layout's "rls:v1:", so during a rolling upgrade the two
// versions count apart rather than misread each other's values, and the old
// keys expire on their TTL. It is short because every key pays for it in
// Redis memory (see AppendKey).
const KeyPrefix = "r2"

// AnchorPrefix starts the key of a warm-up ramp's anchor (pkg/warmup),
// after the deployment's key prefix. A counter key has '{' where this has
// 'w', so no anchor is ever read as a counter or the other way round.
const AnchorPrefix = KeyPrefix + "w"

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
	dst = append(dst, KeyPrefix...)
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

// algCodes is each algorithm's letter in keys. The letters are part of the
// key layout: changing one needs a new KeyPrefix.
var algCodes = [...]byte{
	algo.FixedWindow:   'f',
	algo.SlidingWindow: 's',
	algo.SlidingLog:    'l',
	algo.TokenBucket:   't',
	algo.GCRA:          'g',
}

// appendPolicy appends what of p names the counter: the algorithm's letter,
// then the period in base 36, in seconds when it is whole (every period
// the rules can express is), else '.' and the microseconds. The letter has
// a fixed length, so the period starts right after it.
func appendPolicy(dst []byte, p algo.Policy) []byte {
	if a := p.Algorithm; int(a) < len(algCodes) && algCodes[a] != 0 {
		dst = append(dst, algCodes[a])
	} else {
		// Validated policies never get here; 'x' and two hex digits keep
		// it allocation free and distinct from every letter.
		dst = append(dst, 'x', hexDigits[a>>4], hexDigits[a&0x0f])
	}
	if p.Period%algo.Second == 0 {
		return strconv.AppendInt(dst, p.Period/algo.Second, 36)
	}
	dst = append(dst, '.')
	return strconv.AppendInt(dst, p.Period, 36)
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
		// The hash only reads the bytes; viewing the string in place keeps
		// key encoding allocation free.
		sum := sha256.Sum256(unsafe.Slice(unsafe.StringData(s), len(s)))
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

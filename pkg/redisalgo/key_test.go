package redisalgo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// wantPart is the Part a key must carry for s: s itself, or the digest of a
// long s, computed here apart from key.go so that a round trip through
// ParseKey proves the encoding injective.
func wantPart(s string) Part {
	if len(s) > maxPart {
		sum := sha256.Sum256([]byte(s))
		return Part{Digest: true, Text: hex.EncodeToString(sum[:digestBytes])}
	}
	return Part{Text: s}
}

// keyNow is the time the key tests build keys at (CounterAt), and
// keyHashes the bucket count.
const (
	keyNow    = 1_700_000_123_456_789
	keyHashes = 16
)

// wantKey is what ParseKey (ParseCounter for a fixed window, whose field
// is field) must read back from c's key.
func wantKey(c algo.Check, field string) Key {
	k := Key{Domain: wantPart(c.Domain), HashTag: c.TagIndex(), Algorithm: c.Policy.Algorithm, Period: c.Policy.Period}
	if n := c.Policy.Windows(); n > 1 {
		k.SubWindows = n
	}
	for _, e := range c.Entries {
		k.Entries = append(k.Entries, KeyEntry{Key: wantPart(e.Key), Value: wantPart(e.Value)})
	}
	if t := c.TagIndex(); t >= 0 {
		// FNV-1a of the tagged entry's raw key and value, written out
		// here apart from key.go.
		h := uint64(14695981039346656037)
		for _, b := range []byte(c.Entries[t].Key + "\x00" + c.Entries[t].Value) {
			h = (h ^ uint64(b)) * 1099511628211
		}
		k.Bucket = int64(h % keyHashes)
	}
	if !c.Policy.KeyedWindow() {
		return k
	}
	k.Window = windowOf(c.Policy.Period, keyNow)
	if k.HashTag < 0 {
		k.Bucket = bucketOf([]byte(field), keyHashes)
	}
	if len(field) == 1+2*digestBytes && field[0] == '#' && !strings.Contains(field, ":") {
		// The entries are in the digest.
		k.FieldDigest, k.Entries, k.HashTag = field[1:], nil, -1
	}
	return k
}

// counterAt is CounterAt at keyNow with keyHashes buckets.
func counterAt(c algo.Check) (key, field string) { return CounterAt("", c, keyNow, keyHashes) }

// checkKey proves that key (with field, for a fixed window), c's, parses
// back to c's identity (so distinct identities get distinct keys) and that
// its slot is its tag's.
func checkKey(t *testing.T, c algo.Check, key []byte, field string) {
	t.Helper()
	var got Key
	var err error
	if c.Policy.KeyedWindow() {
		got, err = ParseCounter(string(key), field, "", keyHashes)
	} else {
		got, err = ParseKey(string(key), "", keyHashes)
	}
	if err != nil {
		t.Fatalf("key %q %q of %+v does not decode: %v", key, field, c, err)
	}
	if want := wantKey(c, field); !reflect.DeepEqual(got, want) {
		t.Fatalf("key %q %q of %+v decodes to %+v, want %+v", key, field, c, got, want)
	}
	start := len(LayoutVersion) + 1
	end := start + strings.IndexByte(string(key[start:]), '}')
	if got, want := keySlot(key), int(crc16(key[start:end])%slotCount); got != want {
		t.Fatalf("keySlot(%q) = %d, want %d (slot of the tag)", key, got, want)
	}
}

func entries(kv ...string) []algo.Entry {
	var out []algo.Entry
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, algo.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

var (
	tokenMinute = algo.Policy{Algorithm: algo.TokenBucket, Limit: 10, Period: algo.Minute}
	fixedMinute = algo.Policy{Algorithm: algo.FixedWindow, Limit: 10, Period: algo.Minute}
)

// keyCases must all map to distinct keys; each pair exercises a confusion
// an ad-hoc join would have.
var keyCases = []struct {
	name  string
	check algo.Check
}{
	{"one entry with underscores", algo.Check{Domain: "d", Entries: entries("a", "b_c_d"), HashTag: -1, Policy: tokenMinute}},
	{"two entries", algo.Check{Domain: "d", Entries: entries("a", "b", "c", "d"), HashTag: -1, Policy: tokenMinute}},
	{"one entry with colon and equals", algo.Check{Domain: "d", Entries: entries("a", "b:c=d"), HashTag: -1, Policy: tokenMinute}},
	{"domain holding an entry", algo.Check{Domain: "d:a=b", HashTag: -1, Policy: tokenMinute}},
	{"domain holding an entry as entry", algo.Check{Domain: "d", Entries: entries("a", "b"), HashTag: -1, Policy: tokenMinute}},
	{"closing brace", algo.Check{Domain: "d", Entries: entries("a", "}x"), HashTag: -1, Policy: tokenMinute}},
	{"opening brace", algo.Check{Domain: "d", Entries: entries("a", "{x}"), HashTag: -1, Policy: tokenMinute}},
	{"brace in domain", algo.Check{Domain: "d}", Entries: entries("a", "x"), HashTag: -1, Policy: tokenMinute}},
	{"backslash", algo.Check{Domain: "d", Entries: entries("a", `x\`), HashTag: -1, Policy: tokenMinute}},
	{"percent", algo.Check{Domain: "d", Entries: entries("a", "%7D"), HashTag: -1, Policy: tokenMinute}},
	{"escaped brace literal", algo.Check{Domain: "d", Entries: entries("a", "}"), HashTag: -1, Policy: tokenMinute}},
	{"control bytes", algo.Check{Domain: "d", Entries: entries("a", "x\x00\r\n\x7f"), HashTag: -1, Policy: tokenMinute}},
	{"space", algo.Check{Domain: "d", Entries: entries("a", "x y"), HashTag: -1, Policy: tokenMinute}},
	{"non-ASCII", algo.Check{Domain: "d", Entries: entries("a", "ünï\xff"), HashTag: -1, Policy: tokenMinute}},
	{"empty value", algo.Check{Domain: "d", Entries: entries("a", ""), HashTag: -1, Policy: tokenMinute}},
	{"empty key", algo.Check{Domain: "d", Entries: entries("", "a"), HashTag: -1, Policy: tokenMinute}},
	{"no entries", algo.Check{Domain: "d", HashTag: -1, Policy: tokenMinute}},
	{"empty domain", algo.Check{Entries: entries("a", "b"), HashTag: -1, Policy: tokenMinute}},
	{"long value", algo.Check{Domain: "d", Entries: entries("a", strings.Repeat("v", 65)), HashTag: -1, Policy: tokenMinute}},
	{"long value differing at the end", algo.Check{Domain: "d", Entries: entries("a", strings.Repeat("v", 64)+"w"), HashTag: -1, Policy: tokenMinute}},
	{"value of exactly maxPart bytes", algo.Check{Domain: "d", Entries: entries("a", strings.Repeat("v", 64)), HashTag: -1, Policy: tokenMinute}},
	{"value that looks like a digest", algo.Check{Domain: "d", Entries: entries("a", "#"+strings.Repeat("0", 32)), HashTag: -1, Policy: tokenMinute}},
	{"long domain", algo.Check{Domain: strings.Repeat("d", 100), Entries: entries("a", "b"), HashTag: -1, Policy: tokenMinute}},
	{"long key", algo.Check{Domain: "d", Entries: entries(strings.Repeat("k", 100), "b"), HashTag: -1, Policy: tokenMinute}},
	{"slash in domain", algo.Check{Domain: "d/a=b", HashTag: -1, Policy: tokenMinute}},
	{"other algorithm", algo.Check{Domain: "d", Entries: entries("a", "b"), HashTag: -1, Policy: algo.Policy{Algorithm: algo.GCRA, Limit: 10, Period: algo.Minute}}},
	{"other period", algo.Check{Domain: "d", Entries: entries("a", "b"), HashTag: -1, Policy: algo.Policy{Algorithm: algo.TokenBucket, Limit: 10, Period: algo.Hour}}},
	{"unknown algorithm", algo.Check{Domain: "d", Entries: entries("a", "b"), HashTag: -1, Policy: algo.Policy{Algorithm: 99, Period: algo.Hour}}},
	{"hash tag on entry 0", algo.Check{Domain: "d", Entries: entries("a", "b"), HashTag: 0, Policy: tokenMinute}},
	{"hash tag on entry 1", algo.Check{Domain: "d", Entries: entries("u", "x", "v", "x"), HashTag: 1, Policy: tokenMinute}},
	{"hash tag on entry 0 same values", algo.Check{Domain: "d", Entries: entries("u", "x", "v", "x"), HashTag: 0, Policy: tokenMinute}},
	{"hash tag on entry 1 of two alike", algo.Check{Domain: "d", Entries: entries("u", "x", "u", "x"), HashTag: 1, Policy: tokenMinute}},
	{"hash tag on entry 0 of two alike", algo.Check{Domain: "d", Entries: entries("u", "x", "u", "x"), HashTag: 0, Policy: tokenMinute}},
	{"hash tag with brace value", algo.Check{Domain: "d", Entries: entries("user", "}{", "path", "/x"), HashTag: 0, Policy: tokenMinute}},
	{"equals and slash are plain bytes", algo.Check{Domain: "d", Entries: entries("a=b", "/x=y/"), HashTag: -1, Policy: tokenMinute}},
	{"entry that looks like two", algo.Check{Domain: "d", Entries: entries("a", "b%3Ac%3Ad"), HashTag: -1, Policy: tokenMinute}},
	{"sub-second period", algo.Check{Domain: "d", Entries: entries("a", "b"), HashTag: -1, Policy: algo.Policy{Algorithm: algo.TokenBucket, Limit: 10, Period: 1_500_000}}},
	{"period of one µs", algo.Check{Domain: "d", Entries: entries("a", "b"), HashTag: -1, Policy: algo.Policy{Algorithm: algo.TokenBucket, Limit: 10, Period: 1}}},
	{"zero period", algo.Check{Domain: "d", Entries: entries("a", "b"), HashTag: -1, Policy: algo.Policy{Algorithm: algo.TokenBucket, Limit: 10}}},
	{"negative period", algo.Check{Domain: "d", Entries: entries("a", "b"), HashTag: -1, Policy: algo.Policy{Algorithm: algo.TokenBucket, Limit: 10, Period: -algo.Minute}}},
	{"algorithm zero", algo.Check{Domain: "d", Entries: entries("a", "b"), HashTag: -1, Policy: algo.Policy{Period: algo.Hour}}},
	{"hash tag with colon in the rest", algo.Check{Domain: "d", Entries: entries("u", "x", "p", "a:b"), HashTag: 0, Policy: tokenMinute}},
	{"hash tag with long value", algo.Check{Domain: "d", Entries: entries("user", strings.Repeat("u", 200)), HashTag: 0, Policy: tokenMinute}},
	{"sliding window in sub-windows", algo.Check{Domain: "d", Entries: entries("a", "b"), HashTag: -1, Policy: algo.Policy{Algorithm: algo.SlidingWindow, Limit: 10, Period: algo.Minute, SubWindows: 30}}},
	{"sliding window in other sub-windows", algo.Check{Domain: "d", Entries: entries("a", "b"), HashTag: -1, Policy: algo.Policy{Algorithm: algo.SlidingWindow, Limit: 10, Period: algo.Minute, SubWindows: 60}}},
	{"sliding window in µs sub-windows", algo.Check{Domain: "d", Entries: entries("a", "b"), HashTag: 0, Policy: algo.Policy{Algorithm: algo.SlidingWindow, Limit: 10, Period: 1_500_000, SubWindows: 7}}},
	{"fixed window", algo.Check{Domain: "d", Entries: entries("a", "b"), HashTag: -1, Policy: fixedMinute}},
	{"fixed window, other period", algo.Check{Domain: "d", Entries: entries("a", "b"), HashTag: -1, Policy: algo.Policy{Algorithm: algo.FixedWindow, Limit: 10, Period: algo.Hour}}},
	{"fixed window, two entries", algo.Check{Domain: "d", Entries: entries("a", "b", "c", "d"), HashTag: -1, Policy: fixedMinute}},
	{"fixed window, no entries", algo.Check{Domain: "d", HashTag: -1, Policy: fixedMinute}},
	{"fixed window, entry that looks like two", algo.Check{Domain: "d", Entries: entries("a", "b%3Ac%3Ad"), HashTag: -1, Policy: fixedMinute}},
	{"fixed window, hash tag", algo.Check{Domain: "d", Entries: entries("u", "x", "p", "/a"), HashTag: 0, Policy: fixedMinute}},
	{"fixed window, hash tag on entry 1", algo.Check{Domain: "d", Entries: entries("u", "x", "p", "/a"), HashTag: 1, Policy: fixedMinute}},
	{"fixed window, hash tag alone", algo.Check{Domain: "d", Entries: entries("u", "x"), HashTag: 0, Policy: fixedMinute}},
	{"fixed window, field of 64 bytes", algo.Check{Domain: "d", Entries: entries("a", strings.Repeat("v", 62)), HashTag: -1, Policy: fixedMinute}},
	{"fixed window, field of 65 bytes", algo.Check{Domain: "d", Entries: entries("a", strings.Repeat("v", 63)), HashTag: -1, Policy: fixedMinute}},
	{"fixed window, long field with a hash tag", algo.Check{Domain: "d", Entries: entries("u", "x", "p", strings.Repeat("v", 80)), HashTag: 0, Policy: fixedMinute}},
	{"fixed window, value like a field digest", algo.Check{Domain: "d", Entries: entries("a", "#"+strings.Repeat("0", 32)), HashTag: -1, Policy: fixedMinute}},
	{"fixed window, zero period", algo.Check{Domain: "d", Entries: entries("a", "b"), HashTag: -1, Policy: algo.Policy{Algorithm: algo.FixedWindow, Limit: 10}}},
	{"sliding window in one sub-window", algo.Check{Domain: "d", Entries: entries("a", "b"), HashTag: -1, Policy: algo.Policy{Algorithm: algo.SlidingWindow, Limit: 10, Period: algo.Minute, SubWindows: 1}}},
}

func TestAppendKey(t *testing.T) {
	seen := map[string]string{}
	for _, tc := range keyCases {
		t.Run(tc.name, func(t *testing.T) {
			key, field := counterAt(tc.check)
			checkKey(t, tc.check, []byte(key), field)
			if other, dup := seen[key+" "+field]; dup {
				t.Fatalf("key %q %q shared with case %q", key, field, other)
			}
			seen[key+" "+field] = tc.name
			if len(key) > 512 {
				t.Errorf("key is %d bytes, want bounded", len(key))
			}
		})
	}
}

// TestKeyLayout pins the documented layout: a change here is a change of
// every stored key and needs a new LayoutVersion.
func TestKeyLayout(t *testing.T) {
	for _, tc := range []struct {
		name  string
		check algo.Check
		want  string
	}{
		{"two entries per day", algo.Check{Domain: "shop", Entries: entries("user", "a}b{c:d", "path", "/v1/x"), HashTag: -1,
			Policy: algo.Policy{Algorithm: algo.SlidingWindow, Limit: 5, Period: algo.Day}}, "r3{shop:user:a%7Db%7Bc%3Ad:path:/v1/x:s1uo0}"},
		{"hash tag", algo.Check{Domain: "api", Entries: entries("user", "alice", "path", "/a"), HashTag: 0,
			Policy: algo.Policy{Algorithm: algo.GCRA, Limit: 5, Period: algo.Hour}}, "r3{api:#e}user:alice:#:path:/a:g2s0"},
		{"sub-second period", algo.Check{Domain: "d", HashTag: -1,
			Policy: algo.Policy{Algorithm: algo.SlidingLog, Limit: 5, Period: 1_500_000}}, "r3{d:l.w5eo}"},
		{"unknown algorithm", algo.Check{Domain: "d", HashTag: -1,
			Policy: algo.Policy{Algorithm: 200, Period: algo.Second}}, "r3{d:xC81}"},
		// The two-window estimate keeps the keys it always had (so its
		// stored states read on); sub-windows name theirs.
		{"sliding window, two windows", algo.Check{Domain: "d", HashTag: -1,
			Policy: algo.Policy{Algorithm: algo.SlidingWindow, Period: algo.Second, SubWindows: 1}}, "r3{d:s1}"},
		{"sliding window in 30 sub-windows", algo.Check{Domain: "d", HashTag: -1,
			Policy: algo.Policy{Algorithm: algo.SlidingWindow, Period: algo.Second, SubWindows: 30}}, "r3{d:s1/30}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(AppendKey(nil, tc.check, keyHashes)); got != tc.want {
				t.Errorf("AppendKey = %q, want %q", got, tc.want)
			}
		})
	}
	// A fixed window's counter: a field of its window's hash.
	for _, tc := range []struct {
		name        string
		check       algo.Check
		hash, field string
	}{
		{"fixed window per minute", algo.Check{Domain: "perf", Entries: entries("key", "user-4480405"), HashTag: -1,
			Policy: algo.Policy{Algorithm: algo.FixedWindow, Limit: 5, Period: algo.Minute}}, "r3{perf:f1o:b}va53", "key:user-4480405"},
		{"fixed window with a hash tag", algo.Check{Domain: "api", Entries: entries("user", "alice", "path", "/a"), HashTag: 0,
			Policy: algo.Policy{Algorithm: algo.FixedWindow, Limit: 5, Period: algo.Second}}, "r3{api:#e}f1:4whn", "user:alice:#:path:/a"},
		{"fixed window with a long field", algo.Check{Domain: "d", Entries: entries("a", strings.Repeat("v", 63)), HashTag: -1,
			Policy: algo.Policy{Algorithm: algo.FixedWindow, Limit: 5, Period: algo.Second}}, "", "#" + fieldDigest("a:"+strings.Repeat("v", 63))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hash, field := counterAt(tc.check)
			if (tc.hash != "" && hash != tc.hash) || field != tc.field {
				t.Errorf("CounterAt = %q %q, want %q %q", hash, field, tc.hash, tc.field)
			}
		})
	}
}

// fieldDigest is the hex of a long field's truncated SHA-256, computed here
// apart from key.go.
func fieldDigest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:digestBytes])
}

// TestAppendKeyIgnoresNumbers pins what is not in the key: the limit's
// numbers and the request's hits, so raising a limit keeps the counts.
func TestAppendKeyIgnoresNumbers(t *testing.T) {
	a := algo.Check{Domain: "d", Entries: entries("a", "b"), HashTag: -1, Policy: tokenMinute, Hits: 1}
	b := a
	b.Policy.Limit, b.Policy.Burst, b.Hits, b.Refund = 1000, 2000, 7, true
	if ka, kb := AppendKey(nil, a, keyHashes), AppendKey(nil, b, keyHashes); string(ka) != string(kb) {
		t.Errorf("keys differ for the same limit: %q vs %q", ka, kb)
	}
	// Out-of-range hash tags fall back to the whole identity.
	c := a
	c.HashTag = 5
	if ka, kc := AppendKey(nil, a, keyHashes), AppendKey(nil, c, keyHashes); string(ka) != string(kc) {
		t.Errorf("HashTag out of range: %q, want %q", kc, ka)
	}
}

func TestAppendKeyAppends(t *testing.T) {
	c := keyCases[0].check
	dst := AppendKey([]byte("xyz"), c, keyHashes)
	if want := "xyz" + string(AppendKey(nil, c, keyHashes)); string(dst) != want {
		t.Errorf("AppendKey did not append: %q, want %q", dst, want)
	}
}

// TestHashTagColocates: the limits of one user share a slot when they are
// tagged by the user entry, whatever the rest of the descriptor.
func TestHashTagColocates(t *testing.T) {
	user := func(path string, p algo.Policy) algo.Check {
		return algo.Check{Domain: "api", Entries: entries("user", "alice", "path", path), HashTag: 0, Policy: p}
	}
	a := keySlot(AppendKey(nil, user("/a", tokenMinute), keyHashes))
	for _, c := range []algo.Check{
		user("/b", tokenMinute),
		user("/a", algo.Policy{Algorithm: algo.SlidingWindow, Limit: 1000, Period: algo.Day}),
		{Domain: "api", Entries: entries("user", "alice"), HashTag: 0, Policy: tokenMinute},
	} {
		if s := keySlot(AppendKey(nil, c, keyHashes)); s != a {
			t.Errorf("slot of %+v = %d, want %d like the user's other limits", c, s, a)
		}
	}
}

func TestKeySlot(t *testing.T) {
	// Reference values: CRC-16/XMODEM's check value and slots from the
	// Redis Cluster specification.
	if got := crc16([]byte("123456789")); got != 0x31C3 {
		t.Errorf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	for _, tc := range []struct {
		key  string
		want string // a key hashing to the same slot by the tag rule
	}{
		{"{user1000}.following", "user1000"},
		{"foo{}{bar}", "foo{}{bar}"},
		{"foo{{bar}}zap", "{bar"},
		{"foo{bar}{zap}", "bar"},
		{"{", "{"},
		{"a{b", "a{b"},
		{"}{a}", "a"},
	} {
		if got, want := keySlot([]byte(tc.key)), int(crc16([]byte(tc.want))%slotCount); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", tc.key, got, want)
		}
	}
}

// TestKeySlotMatchesCluster compares keySlot and the key layout with a real
// cluster: CLUSTER KEYSLOT agrees for every case, a limit's key and any key a
// script derives from it by appending share a slot, and default keys spread
// over all three masters.
func TestKeySlotMatchesCluster(t *testing.T) {
	ctx := context.Background()
	cl := redistest.SharedCluster(t)
	cc := cl.ClusterClient(t)
	masters := map[string]bool{}
	for i, tc := range keyCases {
		k0, _ := counterAt(tc.check)
		key := []byte(k0)
		for _, k := range []string{string(key), string(key) + ":prev", string(key) + "}{x}"} {
			got, err := cc.ClusterKeySlot(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			if int(got) != keySlot(key) {
				t.Errorf("%s: CLUSTER KEYSLOT %q = %d, keySlot(limit key) = %d", tc.name, k, got, keySlot(key))
			}
		}
		if i < 30 {
			masters[cl.MasterForSlot(t, keySlot(key)).Addr] = true
		}
	}
	if len(masters) != 3 {
		t.Errorf("30 limits landed on %d masters, want all 3", len(masters))
	}
}

func FuzzKey(f *testing.F) {
	f.Add("d", "a", "b_c_d", "", "", uint8(0), -1, uint8(4), int64(algo.Minute))
	f.Add("d", "a", "b", "c", "d", uint8(2), -1, uint8(2), int64(algo.Second))
	f.Add("d}", "{a", "%7D", ":", "=", uint8(2), 1, uint8(5), int64(1))
	f.Add("", "", "", "", "", uint8(1), 0, uint8(0), int64(-1))
	f.Add("d", "k", strings.Repeat("x", 70), "#", "\x00", uint8(2), 0, uint8(1), int64(0))
	f.Fuzz(func(t *testing.T, dom, k1, v1, k2, v2 string, n uint8, tag int, alg uint8, period int64) {
		c := algo.Check{
			Domain:  dom,
			Entries: entries(k1, v1, k2, v2)[:n%3],
			HashTag: tag,
			Policy:  algo.Policy{Algorithm: algo.Algorithm(alg), Period: period},
		}
		if c.Policy.Algorithm == algo.SlidingWindow {
			c.Policy.SubWindows = int64(n>>2) % (algo.MaxSubWindows + 1)
		}
		// checkKey proves the key decodes back to c's identity (so distinct
		// identities get distinct keys) and that the tag is intact.
		key, field := counterAt(c)
		checkKey(t, c, []byte(key), field)
	})
}

// BenchmarkAppendKey measures encoding a 2-entry descriptor into a reused
// buffer, as the request path does; it must not allocate.
func BenchmarkAppendKey(b *testing.B) {
	c := algo.Check{
		Domain:  "api",
		Entries: entries("remote_address", "203.0.113.7", "path", "/v1/orders"),
		HashTag: -1,
		Policy:  tokenMinute,
	}
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendKey(buf[:0], c, keyHashes)
	}
	if testing.AllocsPerRun(100, func() { buf = AppendKey(buf[:0], c, keyHashes) }) != 0 {
		b.Fatal("AppendKey allocates")
	}
}

func TestAppendKeyAllocs(t *testing.T) {
	buf := make([]byte, 0, 512)
	for _, tc := range keyCases {
		if n := testing.AllocsPerRun(20, func() { buf = AppendKey(buf[:0], tc.check, keyHashes) }); n != 0 {
			t.Errorf("%s: AppendKey allocates %v times", tc.name, n)
		}
	}
}

// TestKeyIsCounterIdentity proves the Redis key names exactly the counter
// algo.SameCounter defines: two checks share a key if and only if they
// share a counter.
func TestKeyIsCounterIdentity(t *testing.T) {
	pol := algo.Policy{Algorithm: algo.FixedWindow, Limit: 5, Period: algo.Minute}
	base := algo.Check{Domain: "d", Entries: []algo.Entry{{Key: "user", Value: "a"}, {Key: "path", Value: "/x"}}, HashTag: -1, Policy: pol}
	with := func(f func(*algo.Check)) algo.Check {
		c := base
		c.Entries = slices.Clone(base.Entries)
		f(&c)
		return c
	}
	vs := []algo.Check{
		base,
		with(func(c *algo.Check) { c.Domain = "e" }),
		with(func(c *algo.Check) { c.Entries[0].Value = "b" }),
		with(func(c *algo.Check) { c.Entries = c.Entries[:1] }),
		with(func(c *algo.Check) { c.HashTag = 0 }),
		with(func(c *algo.Check) { c.HashTag = 1 }),
		with(func(c *algo.Check) { c.HashTag = 9 }),
		with(func(c *algo.Check) { c.Policy.Algorithm = algo.GCRA }),
		with(func(c *algo.Check) { c.Policy.Period = algo.Hour }),
		with(func(c *algo.Check) { c.Policy.Limit, c.Policy.Burst = 50, 60 }),
		with(func(c *algo.Check) { c.Hits, c.Refund = 4, true }),
		// One entry twice: the hash tag on the first or the second is
		// two counters (SameCounter compares TagIndex), so two keys.
		with(func(c *algo.Check) { c.Entries[1] = c.Entries[0]; c.HashTag = 0 }),
		with(func(c *algo.Check) { c.Entries[1] = c.Entries[0]; c.HashTag = 1 }),
	}
	for i := range vs {
		for j := range vs {
			ki, fi := counterAt(vs[i])
			kj, fj := counterAt(vs[j])
			sameKey := ki == kj && fi == fj
			if same := algo.SameCounter(&vs[i], &vs[j]); same != sameKey {
				t.Errorf("variants %d and %d: SameCounter %v, same key %v", i, j, same, sameKey)
			}
		}
	}
}

// FuzzParseKey: ParseKey never panics, and a name it accepts is the one
// AppendKey writes for what it read (one spelling per counter).
func FuzzParseKey(f *testing.F) {
	for _, tc := range keyCases {
		f.Add(string(AppendKey([]byte("pre:"), tc.check, keyHashes)))
	}
	f.Add("pre:r3{d:a:b:x0A1o}")
	f.Add("pre:r3{d:a:%3a:f1o}")
	f.Add("pre:r3{d:a:b:s1/30}")
	f.Add("pre:r3{d:a:b:s1/1}")
	f.Add("pre:r3{d:a:b:f1/30}")
	f.Fuzz(func(t *testing.T, name string) {
		k, err := ParseKey(name, "pre:", keyHashes)
		if err != nil {
			if !errors.Is(err, ErrNotOurs) {
				t.Fatalf("ParseKey(%q) error %v does not wrap ErrNotOurs", name, err)
			}
			return
		}
		c := algo.Check{Domain: k.Domain.Text, HashTag: k.HashTag, Policy: algo.Policy{Algorithm: k.Algorithm, Period: k.Period, SubWindows: k.SubWindows}}
		digest := k.Domain.Digest
		for _, e := range k.Entries {
			c.Entries = append(c.Entries, algo.Entry{Key: e.Key.Text, Value: e.Value.Text})
			digest = digest || e.Key.Digest || e.Value.Digest
		}
		if digest {
			return // the text behind a digest is gone
		}
		if got := string(AppendKey([]byte("pre:"), c, keyHashes)); got != name {
			t.Fatalf("ParseKey(%q) = %+v, which encodes as %q", name, k, got)
		}
	})
}

// FuzzParseCounter: ParseCounter never panics, and a hash and field it
// accepts are the ones CounterAt writes for what it read.
func FuzzParseCounter(f *testing.F) {
	for _, tc := range keyCases {
		if tc.check.Policy.KeyedWindow() {
			hash, field := CounterAt("pre:", tc.check, keyNow, keyHashes)
			f.Add(hash, field)
		}
	}
	f.Add("pre:r3{d:f1o:0}0000", "")
	f.Add("pre:r3{d:#3}f1o:zzzz", "a:b:#")
	f.Add("pre:r3{d:#3}f1o:zzzz", "#"+strings.Repeat("a", 32))
	f.Fuzz(func(t *testing.T, hash, field string) {
		k, err := ParseCounter(hash, field, "pre:", keyHashes)
		if err != nil {
			if !errors.Is(err, ErrNotOurs) {
				t.Fatalf("ParseCounter(%q, %q) error %v does not wrap ErrNotOurs", hash, field, err)
			}
			return
		}
		if k.FieldDigest != "" {
			return // the text behind a digest is gone
		}
		c := algo.Check{Domain: k.Domain.Text, HashTag: k.HashTag, Policy: algo.Policy{Algorithm: k.Algorithm, Period: k.Period}}
		digest := k.Domain.Digest
		for _, e := range k.Entries {
			c.Entries = append(c.Entries, algo.Entry{Key: e.Key.Text, Value: e.Value.Text})
			digest = digest || e.Key.Digest || e.Value.Digest
		}
		if digest {
			return
		}
		// The window: the one the name says, from the epoch (every
		// window index it can name starts before the end of time).
		now := k.Window * k.Period
		if gh, gf := CounterAt("pre:", c, now, keyHashes); gh != hash || gf != field {
			t.Fatalf("ParseCounter(%q, %q) = %+v, which encodes as %q %q", hash, field, k, gh, gf)
		}
	})
}

func TestParseKeyRefuses(t *testing.T) {
	for _, name := range []string{
		"", "r3{d:a:b:t1o}", // no deployment prefix
		"pre:r3", "pre:r3{", "pre:r3{}", "pre:r3{d:a:b:t1o", // no tag
		"pre:r3{d:a:t1o}",                            // a key without its value
		"pre:r3{d:a:b:q1o}",                          // unknown letter
		"pre:r3{d:a:b:t}",                            // no period
		"pre:r3{d:a:b:t01o}",                         // non-canonical period
		"pre:r3{d:a:b:t.lfls}",                       // whole seconds spelt in µs
		"pre:r3{d:a:b%3a:t1o}",                       // lowercase escape
		"pre:r3{d:a:b%41:t1o}",                       // needless escape
		"pre:r3{d:a:b c:t1o}",                        // unescaped space
		"pre:r3{d:a:#abc:t1o}",                       // short digest
		"pre:r3{d:#3}a:b:c:d:t1o",                    // hash-tag layout without '#'
		"pre:r3{d:#3}a:b:#:#:t1o",                    // two '#'
		"pre:r3{d:#3}#:t1o",                          // no tagged entry
		"pre:r3{d:a:b}#:t1o",                         // the old tag, not a bucket
		"pre:r3{d:#03}a:b:#:t1o",                     // non-canonical bucket
		"pre:r3{d:a:b:x01f1o}",                       // a known algorithm as a number
		"pre:r3{d:a:b:tzzzzzzzzzzzzz}",               // overflowing period
		"pre:r3{" + strings.Repeat("0", 65) + ":t0}", // a 65-byte part kept as is (fuzz)
		"pre:r3{d:a:b:s1/1}",                         // one sub-window is spelt without
		"pre:r3{d:a:b:s1/61}",                        // above MaxSubWindows
		"pre:r3{d:a:b:s1/030}",                       // non-canonical count
		"pre:r3{d:a:b:s1/}",                          // no count
		"pre:r3{d:a:b:t1/30}",                        // sub-windows of a token bucket
		"pre:r3{d:a:b:f1o}",                          // a fixed window's state is a hash field
	} {
		if k, err := ParseKey(name, "pre:", keyHashes); err == nil || !errors.Is(err, ErrNotOurs) {
			t.Errorf("ParseKey(%q) = %+v, %v; want ErrNotOurs", name, k, err)
		}
	}
	for _, name := range []string{"pre:r3{d:f1o:b}0000", "pre:r3{d:#3}f1o:zzzz"} {
		if _, err := ParseKey(name, "pre:", keyHashes); !errors.Is(err, ErrCounterHash) {
			t.Errorf("ParseKey(%q) = %v; want ErrCounterHash", name, err)
		}
	}
}

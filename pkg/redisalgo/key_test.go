package redisalgo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// part is one key component as the encoding should carry it: the raw value,
// or the digest of a long one.
type part struct {
	digest bool
	s      string
}

// identity is what a key must identify; decodeKey and wantIdentity build it
// independently, so a round trip proves the encoding injective.
type identity struct {
	domain  part
	tag     []part // key, value of the hash-tag entry; nil by default
	tagAt   int    // index of the hash-tag entry; -1 by default
	entries []part // alternating keys and values
	alg     algo.Algorithm
	period  int64
}

func wantPart(s string) part {
	if len(s) > maxPart {
		sum := sha256.Sum256([]byte(s))
		return part{digest: true, s: hex.EncodeToString(sum[:digestBytes])}
	}
	return part{s: s}
}

func wantIdentity(c algo.Check) identity {
	id := identity{domain: wantPart(c.Domain), tagAt: c.TagIndex(), alg: c.Policy.Algorithm, period: c.Policy.Period}
	if c.HashTag >= 0 && c.HashTag < len(c.Entries) {
		e := c.Entries[c.HashTag]
		id.tag = []part{wantPart(e.Key), wantPart(e.Value)}
	}
	for _, e := range c.Entries {
		id.entries = append(id.entries, wantPart(e.Key), wantPart(e.Value))
	}
	return id
}

// keyAlgorithms is the documented letter of each algorithm, written out
// apart from key.go's table.
var keyAlgorithms = map[byte]algo.Algorithm{
	'f': algo.FixedWindow, 's': algo.SlidingWindow, 'l': algo.SlidingLog,
	't': algo.TokenBucket, 'g': algo.GCRA,
}

// decodePolicy parses the last field, "<letter><period>", rejecting any
// form AppendKey would not write, so that one policy has one spelling.
func decodePolicy(s string) (algo.Algorithm, int64, error) {
	if s == "" {
		return 0, 0, fmt.Errorf("empty algorithm and period")
	}
	var a algo.Algorithm
	if s[0] == 'x' {
		if len(s) < 3 || strings.ToUpper(s[1:3]) != s[1:3] {
			return 0, 0, fmt.Errorf("bad algorithm number in %q", s)
		}
		v, err := strconv.ParseUint(s[1:3], 16, 8)
		if err != nil {
			return 0, 0, fmt.Errorf("bad algorithm number in %q: %v", s, err)
		}
		a, s = algo.Algorithm(v), s[3:]
		for _, known := range keyAlgorithms {
			if a == known {
				return 0, 0, fmt.Errorf("known algorithm %d spelt as a number", v)
			}
		}
	} else {
		var ok bool
		if a, ok = keyAlgorithms[s[0]]; !ok {
			return 0, 0, fmt.Errorf("unknown algorithm letter in %q", s)
		}
		s = s[1:]
	}
	us, micro := strings.CutPrefix(s, ".")
	v, err := strconv.ParseInt(us, 36, 64)
	if err != nil || strconv.FormatInt(v, 36) != us {
		return 0, 0, fmt.Errorf("bad period %q", s)
	}
	if micro {
		if v%algo.Second == 0 {
			return 0, 0, fmt.Errorf("whole seconds %q spelt in µs", s)
		}
		return a, v, nil
	}
	return a, v * algo.Second, nil
}

// decodePart reverses appendPart, rejecting any byte that should have been
// escaped.
func decodePart(s string) (part, error) {
	if h, ok := strings.CutPrefix(s, "#"); ok {
		if len(h) != 2*digestBytes || strings.ToLower(h) != h {
			return part{}, fmt.Errorf("bad digest %q", s)
		}
		if _, err := hex.DecodeString(h); err != nil {
			return part{}, fmt.Errorf("bad digest %q: %v", s, err)
		}
		return part{digest: true, s: h}, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' {
			if i+2 >= len(s) {
				return part{}, fmt.Errorf("truncated escape in %q", s)
			}
			v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
			if err != nil || strings.ToUpper(s[i+1:i+3]) != s[i+1:i+3] {
				return part{}, fmt.Errorf("bad escape in %q", s)
			}
			if !mustEscape[v] {
				return part{}, fmt.Errorf("needless escape of %#x in %q", v, s)
			}
			b.WriteByte(byte(v))
			i += 2
			continue
		}
		if mustEscape[c] {
			return part{}, fmt.Errorf("unescaped %q in %q", c, s)
		}
		b.WriteByte(c)
	}
	return part{s: b.String()}, nil
}

// decodeKey parses a key by the documented layout, splitting the tag where
// Redis would: at the first '}' after the first '{'.
func decodeKey(key string) (identity, error) {
	id := identity{tagAt: -1}
	rest, ok := strings.CutPrefix(key, KeyPrefix+"{")
	if !ok {
		return id, fmt.Errorf("no %q prefix", KeyPrefix+"{")
	}
	if strings.IndexByte(key, '{') != len(KeyPrefix) {
		return id, fmt.Errorf("first '{' is not the tag's")
	}
	tag, after, ok := strings.Cut(rest, "}")
	if !ok || tag == "" {
		return id, fmt.Errorf("no hash tag")
	}
	var fields []string
	var err error
	if after == "" {
		// Default: the tag is domain, key and value pairs, policy.
		fields = strings.Split(tag, ":")
		if id.domain, err = decodePart(fields[0]); err != nil {
			return id, err
		}
		fields = fields[1:]
	} else {
		// Hash tag: the tag is domain, key, value; the pairs and the
		// policy follow it.
		tf := strings.Split(tag, ":")
		if len(tf) != 3 {
			return id, fmt.Errorf("hash tag %q has %d fields, want domain, key and value", tag, len(tf))
		}
		var parts [3]part
		for i, f := range tf {
			if parts[i], err = decodePart(f); err != nil {
				return id, fmt.Errorf("hash tag: %v", err)
			}
		}
		id.domain, id.tag = parts[0], []part{parts[1], parts[2]}
		// The tagged entry stands as one '#' field among the pairs.
		fields = strings.Split(after, ":")
		if len(fields) == 0 {
			return id, fmt.Errorf("nothing after the hash tag")
		}
		last := len(fields) - 1
		if id.alg, id.period, err = decodePolicy(fields[last]); err != nil {
			return id, err
		}
		marks := 0
		for i := 0; i < last; i++ {
			if fields[i] == "#" {
				marks++
				id.tagAt = len(id.entries) / 2
				id.entries = append(id.entries, id.tag...)
				continue
			}
			if i+1 >= last {
				return id, fmt.Errorf("entry key %q has no value", fields[i])
			}
			if err := id.appendEntry(fields[i], fields[i+1]); err != nil {
				return id, err
			}
			i++
		}
		if marks != 1 {
			return id, fmt.Errorf("%d '#' fields after the hash tag, want 1", marks)
		}
		return id, nil
	}
	if len(fields)%2 != 1 {
		return id, fmt.Errorf("fields %q are not key and value pairs and a policy", fields)
	}
	last := len(fields) - 1
	if id.alg, id.period, err = decodePolicy(fields[last]); err != nil {
		return id, err
	}
	for i := 0; i < last; i += 2 {
		if err := id.appendEntry(fields[i], fields[i+1]); err != nil {
			return id, err
		}
	}
	return id, nil
}

// appendEntry decodes one entry's key and value.
func (id *identity) appendEntry(k, v string) error {
	kp, err1 := decodePart(k)
	vp, err2 := decodePart(v)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("entry: %v %v", err1, err2)
	}
	id.entries = append(id.entries, kp, vp)
	return nil
}

// checkKey asserts that key decodes to c's identity and that its slot is
// the slot of its intended tag.
func checkKey(t *testing.T, c algo.Check, key []byte) {
	t.Helper()
	got, err := decodeKey(string(key))
	if err != nil {
		t.Fatalf("key %q of %+v does not decode: %v", key, c, err)
	}
	if want := wantIdentity(c); !reflect.DeepEqual(got, want) {
		t.Fatalf("key %q of %+v decodes to %+v, want %+v", key, c, got, want)
	}
	start := len(KeyPrefix) + 1
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

var tokenMinute = algo.Policy{Algorithm: algo.TokenBucket, Limit: 10, Period: algo.Minute}

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
}

func TestAppendKey(t *testing.T) {
	seen := map[string]string{}
	for _, tc := range keyCases {
		t.Run(tc.name, func(t *testing.T) {
			key := AppendKey(nil, tc.check)
			checkKey(t, tc.check, key)
			if other, dup := seen[string(key)]; dup {
				t.Fatalf("key %q shared with case %q", key, other)
			}
			seen[string(key)] = tc.name
			if len(key) > 512 {
				t.Errorf("key is %d bytes, want bounded", len(key))
			}
		})
	}
}

// TestKeyLayout pins the documented layout: a change here is a change of
// every stored key and needs a new KeyPrefix.
func TestKeyLayout(t *testing.T) {
	for _, tc := range []struct {
		name  string
		check algo.Check
		want  string
	}{
		{"fixed window per minute", algo.Check{Domain: "perf", Entries: entries("key", "user-4480405"), HashTag: -1,
			Policy: algo.Policy{Algorithm: algo.FixedWindow, Limit: 5, Period: algo.Minute}}, "r2{perf:key:user-4480405:f1o}"},
		{"two entries per day", algo.Check{Domain: "shop", Entries: entries("user", "a}b{c:d", "path", "/v1/x"), HashTag: -1,
			Policy: algo.Policy{Algorithm: algo.SlidingWindow, Limit: 5, Period: algo.Day}}, "r2{shop:user:a%7Db%7Bc%3Ad:path:/v1/x:s1uo0}"},
		{"hash tag", algo.Check{Domain: "api", Entries: entries("user", "alice", "path", "/a"), HashTag: 0,
			Policy: algo.Policy{Algorithm: algo.GCRA, Limit: 5, Period: algo.Hour}}, "r2{api:user:alice}#:path:/a:g2s0"},
		{"sub-second period", algo.Check{Domain: "d", HashTag: -1,
			Policy: algo.Policy{Algorithm: algo.SlidingLog, Limit: 5, Period: 1_500_000}}, "r2{d:l.w5eo}"},
		{"unknown algorithm", algo.Check{Domain: "d", HashTag: -1,
			Policy: algo.Policy{Algorithm: 200, Period: algo.Second}}, "r2{d:xC81}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(AppendKey(nil, tc.check)); got != tc.want {
				t.Errorf("AppendKey = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestAppendKeyIgnoresNumbers pins what is not in the key: the limit's
// numbers and the request's hits, so raising a limit keeps the counts.
func TestAppendKeyIgnoresNumbers(t *testing.T) {
	a := algo.Check{Domain: "d", Entries: entries("a", "b"), HashTag: -1, Policy: tokenMinute, Hits: 1}
	b := a
	b.Policy.Limit, b.Policy.Burst, b.Hits, b.Refund = 1000, 2000, 7, true
	if ka, kb := AppendKey(nil, a), AppendKey(nil, b); string(ka) != string(kb) {
		t.Errorf("keys differ for the same limit: %q vs %q", ka, kb)
	}
	// Out-of-range hash tags fall back to the whole identity.
	c := a
	c.HashTag = 5
	if ka, kc := AppendKey(nil, a), AppendKey(nil, c); string(ka) != string(kc) {
		t.Errorf("HashTag out of range: %q, want %q", kc, ka)
	}
}

func TestAppendKeyAppends(t *testing.T) {
	c := keyCases[0].check
	dst := AppendKey([]byte("xyz"), c)
	if want := "xyz" + string(AppendKey(nil, c)); string(dst) != want {
		t.Errorf("AppendKey did not append: %q, want %q", dst, want)
	}
}

// TestHashTagColocates: the limits of one user share a slot when they are
// tagged by the user entry, whatever the rest of the descriptor.
func TestHashTagColocates(t *testing.T) {
	user := func(path string, p algo.Policy) algo.Check {
		return algo.Check{Domain: "api", Entries: entries("user", "alice", "path", path), HashTag: 0, Policy: p}
	}
	a := keySlot(AppendKey(nil, user("/a", tokenMinute)))
	for _, c := range []algo.Check{
		user("/b", tokenMinute),
		user("/a", algo.Policy{Algorithm: algo.SlidingWindow, Limit: 1000, Period: algo.Day}),
		{Domain: "api", Entries: entries("user", "alice"), HashTag: 0, Policy: tokenMinute},
	} {
		if s := keySlot(AppendKey(nil, c)); s != a {
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
		key := AppendKey(nil, tc.check)
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
		// checkKey proves the key decodes back to c's identity (so distinct
		// identities get distinct keys) and that the tag is intact.
		checkKey(t, c, AppendKey(nil, c))
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
		buf = AppendKey(buf[:0], c)
	}
	if testing.AllocsPerRun(100, func() { buf = AppendKey(buf[:0], c) }) != 0 {
		b.Fatal("AppendKey allocates")
	}
}

func TestAppendKeyAllocs(t *testing.T) {
	buf := make([]byte, 0, 512)
	for _, tc := range keyCases {
		if n := testing.AllocsPerRun(20, func() { buf = AppendKey(buf[:0], tc.check) }); n != 0 {
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
			sameKey := string(AppendKey(nil, vs[i])) == string(AppendKey(nil, vs[j]))
			if same := algo.SameCounter(&vs[i], &vs[j]); same != sameKey {
				t.Errorf("variants %d and %d: SameCounter %v, same key %v", i, j, same, sameKey)
			}
		}
	}
}

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
	entries []part // alternating keys and values
	alg     string
	period  string
}

func wantPart(s string) part {
	if len(s) > maxPart {
		sum := sha256.Sum256([]byte(s))
		return part{digest: true, s: hex.EncodeToString(sum[:digestBytes])}
	}
	return part{s: s}
}

func wantIdentity(c algo.Check) identity {
	id := identity{domain: wantPart(c.Domain), period: strconv.FormatInt(c.Policy.Period, 10)}
	if c.HashTag >= 0 && c.HashTag < len(c.Entries) {
		e := c.Entries[c.HashTag]
		id.tag = []part{wantPart(e.Key), wantPart(e.Value)}
	}
	for _, e := range c.Entries {
		id.entries = append(id.entries, wantPart(e.Key), wantPart(e.Value))
	}
	id.alg = strconv.Itoa(int(c.Policy.Algorithm))
	if a := c.Policy.Algorithm; a >= algo.FixedWindow && a <= algo.GCRA {
		id.alg = a.String()
	}
	return id
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
	var id identity
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
		fields = strings.Split(tag, ":")
		if id.domain, err = decodePart(fields[0]); err != nil {
			return id, err
		}
		fields = fields[1:]
	} else {
		dom, te, ok := strings.Cut(tag, "/")
		if !ok {
			return id, fmt.Errorf("text after the tag but no '/' in it")
		}
		if id.domain, err = decodePart(dom); err != nil {
			return id, err
		}
		k, v, ok := strings.Cut(te, "=")
		if !ok {
			return id, fmt.Errorf("tag entry %q has no '='", te)
		}
		kp, err1 := decodePart(k)
		vp, err2 := decodePart(v)
		if err1 != nil || err2 != nil {
			return id, fmt.Errorf("tag entry: %v %v", err1, err2)
		}
		id.tag = []part{kp, vp}
		fields = strings.Split(after, ":")
		if fields[0] != "" {
			return id, fmt.Errorf("rest %q does not start with ':'", after)
		}
		fields = fields[1:]
	}
	if len(fields) < 2 {
		return id, fmt.Errorf("missing algorithm or period")
	}
	id.alg, id.period = fields[len(fields)-2], fields[len(fields)-1]
	for _, f := range fields[:len(fields)-2] {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return id, fmt.Errorf("entry %q has no '='", f)
		}
		kp, err1 := decodePart(k)
		vp, err2 := decodePart(v)
		if err1 != nil || err2 != nil {
			return id, fmt.Errorf("entry: %v %v", err1, err2)
		}
		id.entries = append(id.entries, kp, vp)
	}
	return id, nil
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
	{"hash tag with brace value", algo.Check{Domain: "d", Entries: entries("user", "}{", "path", "/x"), HashTag: 0, Policy: tokenMinute}},
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

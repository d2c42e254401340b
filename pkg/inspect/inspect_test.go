package inspect

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/rulestest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/redisalgo"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

func TestMain(m *testing.M) { redistest.Main(m) }

const testRules = `domain: api
descriptors:
  - key: user
    rate_limits:
      - {unit: hour, requests_per_unit: 10, algorithm: fixed_window}
      - {unit: hour, requests_per_unit: 10, algorithm: sliding_window}
      - {unit: hour, requests_per_unit: 10, algorithm: sliding_log}
      - {unit: hour, requests_per_unit: 10, algorithm: token_bucket}
      - {unit: hour, requests_per_unit: 10, algorithm: gcra}
    descriptors:
      - key: path
        hash_tag: user
        rate_limit: {unit: hour, requests_per_unit: 5, algorithm: fixed_window}
`

// Long descriptor values: longPart is one part over 64 bytes (a digest
// within the key or field), longField makes a fixed window's field over 64
// bytes though each part fits (the whole field is a digest), and longPath
// does so for the hash-tagged rule.
var (
	longPart  = strings.Repeat("u", 100)
	longField = strings.Repeat("v", 60)
	longPath  = "/" + strings.Repeat("p", 55)
)

// counter is a fixed window's counter the test expects inspect to list.
type counter struct {
	name    string
	check   algo.Check
	value   int64
	rule    string // "" when the entries are in a digest
	entries string // key=value, …
}

// fixture writes, through the real Redis backend with hashes counter
// hashes, 3 hits on each limit of user=alice (one counter per
// algorithm), 1 on user=bob,path=/x and on user=bob,path=longPath (hash
// tag), and 1 on user=longPart and on user=longField, and returns the
// rules and the fixed windows' counters with where they may be: their
// names at the write's start and end, which differ only when a window
// ends in between.
func fixture(t *testing.T, b *redisalgo.Backend, prefix string, hashes int) (*rules.Snapshot, []counter, map[string][2]string) {
	t.Helper()
	snap := rulestest.Snapshot(t, "api.yaml", testRules, rules.Options{})
	var checks []algo.Check
	var fixed []counter
	add := func(name string, hits int64, kv ...string) {
		var entries []algo.Entry
		var text []string
		for i := 0; i < len(kv); i += 2 {
			entries = append(entries, algo.Entry{Key: kv[i], Value: kv[i+1]})
			text = append(text, kv[i]+"="+kv[i+1])
		}
		r := snap.Match("api", entries)
		for _, l := range r.Limits {
			c := algo.Check{Domain: "api", Entries: entries, HashTag: r.HashTag, Policy: l.Policy, Hits: hits}
			checks = append(checks, c)
			if l.Policy.Algorithm == algo.FixedWindow {
				fixed = append(fixed, counter{name: name, check: c, value: hits, rule: r.ID, entries: strings.Join(text, ", ")})
			}
		}
	}
	add("untagged", 3, "user", "alice")
	add("hash tag", 1, "user", "bob", "path", "/x")
	add("hash tag, field digest", 1, "user", "bob", "path", longPath)
	add("part digest", 1, "user", longPart)
	add("field digest", 1, "user", longField)
	where := map[string][2]string{}
	start := time.Now()
	for _, c := range checks {
		if _, err := b.Apply(context.Background(), time.Now(), []algo.Check{c}); err != nil {
			t.Fatal(err)
		}
	}
	end := time.Now()
	for _, c := range fixed {
		h0, f := redisalgo.CounterAt(prefix, c.check, start.UnixMicro(), hashes)
		h1, _ := redisalgo.CounterAt(prefix, c.check, end.UnixMicro(), hashes)
		where[f] = [2]string{h0, h1}
	}
	return snap, fixed, where
}

// foreign writes what inspect must not take for ours, nor crash on: a key
// of another application, a hash named as a fixed window's with a field
// no envoy-rls writes, fields of ours holding a non-number and a negative
// count (unreadable), and a string under a fixed window's hash name. It
// returns how many foreign keys and fields, and unreadable fields, it
// wrote.
func foreign(t *testing.T, c redis.UniversalClient, prefix string, hashes int) (int, int) {
	t.Helper()
	ctx := context.Background()
	pol := algo.Policy{Algorithm: algo.FixedWindow, Limit: 10, Period: algo.Hour}
	at := func(user string) (string, string) {
		return redisalgo.CounterAt(prefix, algo.Check{Domain: "api", Entries: []algo.Entry{{Key: "user", Value: user}}, HashTag: -1, Policy: pol}, time.Now().UnixMicro(), hashes)
	}
	mallory, mf := at("mallory")
	trudy, tf := at("trudy")
	for _, w := range []struct {
		key   string
		field string
		value string
	}{
		{mallory, mf, "many"},
		{mallory, "not a field: of ours", "1"},
		{trudy, tf, "-2"},
	} {
		if err := c.HSet(ctx, w.key, w.field, w.value).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.Expire(ctx, w.key, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"someone-else:{api:user:alice:f2s}", prefix + redisalgo.LayoutVersion + "{api:f1o:0}0000"} {
		if err := c.Set(ctx, k, "x", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return 3, 2
}

// writes returns each master's count of changes to its data set
// (rdb_changes_since_last_save) and its DBSIZE: unchanged by a read-only
// walk. The counters live for an hour, so no expiry changes them meanwhile.
func writes(t *testing.T, m Masters) map[string]string {
	t.Helper()
	out := map[string]string{}
	var mu sync.Mutex // ForEachMaster runs fn on the masters concurrently
	err := m.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "persistence").Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "rdb_changes_since_last_save:"); ok {
				n, err := c.DBSize(ctx).Result()
				if err != nil {
					return err
				}
				mu.Lock()
				out[c.Options().Addr] = v + " changes, " + strconv.FormatInt(n, 10) + " keys"
				mu.Unlock()
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestInspect: inspect decodes every counter the real backend wrote,
// keys and fixed windows' fields alike (untagged, hash-tagged, with a
// digest), with their counts, TTL and rules, tells foreign and unreadable
// ones apart, bounds the walk with --max-keys, and writes nothing; on
// standalone (with a non-default counter-hash count and an LFU policy) and
// on a Cluster.
func TestInspect(t *testing.T) {
	for _, tc := range []struct {
		name    string
		masters int
		hashes  int // the deployment's --redis-counter-hashes; 0: the default
		setup   func(t *testing.T, hashes int) (Masters, *redisalgo.Backend, redis.UniversalClient)
	}{
		{"standalone", 1, 5, func(t *testing.T, hashes int) (Masters, *redisalgo.Backend, redis.UniversalClient) {
			c := redistest.Standalone(t).Client(t)
			// An LFU policy makes the most-used list rank by OBJECT FREQ.
			if err := c.ConfigSet(context.Background(), "maxmemory-policy", "allkeys-lfu").Err(); err != nil {
				t.Fatal(err)
			}
			b, err := redisalgo.New(c, redisalgo.Options{KeyPrefix: "pre:", CounterHashes: hashes})
			if err != nil {
				t.Fatal(err)
			}
			return Single{Client: c}, b, c
		}},
		{"cluster", 3, 0, func(t *testing.T, hashes int) (Masters, *redisalgo.Backend, redis.UniversalClient) {
			c := redistest.SharedCluster(t).ClusterClient(t)
			b, err := redisalgo.NewCluster(c, redisalgo.Options{KeyPrefix: "pre:", CounterHashes: hashes})
			if err != nil {
				t.Fatal(err)
			}
			return c, b, c
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			m, b, client := tc.setup(t, tc.hashes)
			t.Cleanup(b.Close)
			hashes := cmp.Or(tc.hashes, redisalgo.DefaultCounterHashes)
			snap, fixed, where := fixture(t, b, "pre:", hashes)
			nForeign, nUnreadable := foreign(t, client, "pre:", hashes)
			ttlBefore := pttls(t, client, where)
			before := writes(t, m)
			// COUNT 3 takes several SCAN steps; Top 100 lists every counter.
			rep, err := Run(ctx, m, Options{KeyPrefix: "pre:", CounterHashes: tc.hashes, Count: 3, Rules: snap, Top: 100})
			if err != nil {
				t.Fatal(err)
			}
			if after := writes(t, m); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("inspect wrote: before %v, after %v", before, after)
			}
			ttlAfter := pttls(t, client, where)
			checkReport(t, rep, tc.masters, tc.name == "standalone", nForeign, nUnreadable)
			checkFixed(t, client, rep, fixed, where, ttlBefore, ttlAfter)

			for _, bound := range []int{1, 2, 5, 12} {
				partial, err := Run(ctx, m, Options{KeyPrefix: "pre:", CounterHashes: tc.hashes, Count: 1, MaxKeys: bound})
				if err != nil {
					t.Fatal(err)
				}
				if !partial.Partial || partial.Scanned != bound || partial.Ours+partial.Foreign != bound {
					t.Errorf("--max-keys %d: partial %v, scanned %d, read %d", bound, partial.Partial, partial.Scanned, partial.Ours+partial.Foreign)
				}
			}
			var text bytes.Buffer
			if err := WriteText(&text, rep); err != nil {
				t.Fatal(err)
			}
			alice, af := redisalgo.CounterAt("pre:", fixed[0].check, time.Now().UnixMicro(), hashes)
			for _, want := range []string{
				fmt.Sprintf("%d envoy-rls", rep.Ours), fmt.Sprintf("%d foreign", nForeign), fmt.Sprintf("%d unreadable", nUnreadable),
				// A fixed window's counter: its hash, then its field.
				alice[:len(alice)-4], " field " + af + "\n    api [user=alice] fixed_window/1h0m0s rule api.user, remaining 7; window at ",
				"; value 3; ",
				"[entries in digest #",
			} {
				if !strings.Contains(text.String(), want) {
					t.Errorf("text report lacks %q:\n%s", want, text.String())
				}
			}
		})
	}
}

// pttls returns the PTTL of every hash the fixed windows may be in.
func pttls(t *testing.T, c redis.UniversalClient, where map[string][2]string) map[string]time.Duration {
	t.Helper()
	out := map[string]time.Duration{}
	for _, w := range where {
		for _, h := range w {
			d, err := c.PTTL(context.Background(), h).Result()
			if err != nil {
				t.Fatal(err)
			}
			out[h] = d
		}
	}
	return out
}

// checkFixed checks each fixed window's counter as inspect lists it: in
// its hash, with its field, count, rule and entries (or digest), the
// hash's TTL (between the PTTLs read before and after the walk) and a
// share of the hash's memory.
func checkFixed(t *testing.T, c redis.UniversalClient, rep *Report, fixed []counter, where map[string][2]string, before, after map[string]time.Duration) {
	t.Helper()
	byField := map[string]Key{}
	for _, k := range rep.TopUsed {
		if k.Field != "" {
			byField[k.Field] = k
		}
	}
	for _, want := range fixed {
		t.Run(want.name, func(t *testing.T) {
			_, field := redisalgo.CounterAt("", want.check, 0, 1)
			k, ok := byField[field]
			if !ok {
				t.Fatalf("no counter with field %q in %+v", field, rep.TopUsed)
			}
			if w := where[field]; k.Name != w[0] && k.Name != w[1] {
				t.Errorf("hash %q, want %q", k.Name, w[0])
			}
			digest := strings.HasPrefix(field, "#")
			var entries []string
			for _, e := range k.Entries {
				entries = append(entries, e.Key+"="+e.Value)
			}
			switch {
			case k.Algorithm != "fixed_window" || k.PeriodUS != algo.Hour || k.Domain != "api":
				t.Errorf("counter %+v, want api's fixed_window/1h", k)
			case k.Value != want.value || !strings.HasPrefix(k.State, "window at "):
				t.Errorf("value %d, state %q; want %d hits", k.Value, k.State, want.value)
			case digest && (k.FieldDigest != field[1:] || k.Rule != "" || len(k.Entries) != 0):
				t.Errorf("digest %q, rule %q, entries %v; want the field's digest %q, no rule, no entries", k.FieldDigest, k.Rule, entries, field[1:])
			case !digest && (k.FieldDigest != "" || strings.Join(entries, ", ") != want.entries && want.name != "part digest"):
				t.Errorf("digest %q, entries %v; want %s", k.FieldDigest, entries, want.entries)
			case !digest && want.name != "part digest" && (k.Rule != want.rule || k.Remaining < 0):
				t.Errorf("rule %q, remaining %d; want rule %s", k.Rule, k.Remaining, want.rule)
			case want.check.HashTag >= 0 && !digest && k.HashTag != "user":
				t.Errorf("hash tag %q, want user", k.HashTag)
			}
			ttl := time.Duration(k.TTLMS * float64(time.Millisecond))
			if b, a := before[k.Name], after[k.Name]; a <= 0 || ttl > b || ttl < a.Truncate(time.Millisecond) {
				t.Errorf("ttl %v, want the hash's PTTL (%v before the walk, %v after)", ttl, b, a)
			}
			mem, err := c.MemoryUsage(context.Background(), k.Name).Result()
			if err != nil {
				t.Fatal(err)
			}
			if k.MemoryBytes <= 0 || k.MemoryBytes > mem {
				t.Errorf("memory %d, want a share of the hash's %d bytes", k.MemoryBytes, mem)
			}
		})
	}
}

func checkReport(t *testing.T, rep *Report, masters int, lfu bool, nForeign, nUnreadable int) {
	t.Helper()
	// 5 limits each of alice, the long part and the long field, 2 of bob
	// (one a digest), and the unreadable fields: fixed windows' fields
	// count as keys.
	ours := 5 + 5 + 5 + 2 + nUnreadable
	if rep.Masters != masters || rep.Ours != ours || rep.Foreign != nForeign || rep.Unreadable != nUnreadable || rep.Partial || rep.MemoryBytes <= 0 {
		t.Fatalf("report: masters %d, ours %d, foreign %d, unreadable %d, partial %v, memory %d; want %d, %d, %d, %d, not partial",
			rep.Masters, rep.Ours, rep.Foreign, rep.Unreadable, rep.Partial, rep.MemoryBytes, masters, ours, nForeign, nUnreadable)
	}
	if rep.Scanned != ours+nForeign {
		t.Errorf("scanned %d, want %d: every key and field", rep.Scanned, ours+nForeign)
	}
	if len(rep.Domains) != 1 || rep.Domains[0].Name != "api" || rep.Domains[0].Keys != ours {
		t.Errorf("domains %+v", rep.Domains)
	}
	var ruleNames []string
	for _, g := range rep.Rules {
		ruleNames = append(ruleNames, fmt.Sprintf("%s:%d", g.Name, g.Keys))
	}
	sort.Strings(ruleNames)
	// alice's 5, the long field's 4 keys and the 2 unreadable fields
	// match api.user; digests group by shape.
	want := []string{"api.user.path:1", "api.user:11", "api[#digest] fixed_window/1h0m0s:2", "api[user] fixed_window/1h0m0s:1", "api[user] gcra/1h0m0s:1", "api[user] sliding_log/1h0m0s:1", "api[user] sliding_window/1h0m0s:1", "api[user] token_bucket/1h0m0s:1"}
	if fmt.Sprint(ruleNames) != fmt.Sprint(want) {
		t.Errorf("rules %v, want %v (the digest keys by shape)", ruleNames, want)
	}
	expiring := 0
	for _, b := range rep.TTL[:len(rep.TTL)-1] {
		expiring += b.Keys
	}
	if expiring != ours {
		t.Errorf("TTL distribution %+v, want all %d keys under a day", rep.TTL, ours)
	}
	if len(rep.Largest) != ours || len(rep.TopUsed) != ours {
		t.Errorf("largest %d, top %d, want %d each", len(rep.Largest), len(rep.TopUsed), ours)
	}
	unreadable := 0
	for _, k := range rep.TopUsed {
		if k.Domain != "api" || k.TTLMS <= 0 || k.MemoryBytes <= 0 {
			t.Errorf("key %+v", k)
		}
		if k.State == "unreadable" {
			unreadable++
			if k.Field == "" || k.Algorithm != "fixed_window" {
				t.Errorf("unreadable %+v, want a fixed window's field", k)
			}
		}
	}
	if unreadable != nUnreadable {
		t.Errorf("%d keys listed unreadable, want %d", unreadable, nUnreadable)
	}
	if lfu {
		if !rep.LFU || rep.TopBy != "freq" || rep.TopUsed[0].Freq <= 0 {
			t.Errorf("LFU %v, top by %s, top freq %d; want ranking by OBJECT FREQ", rep.LFU, rep.TopBy, rep.TopUsed[0].Freq)
		}
		return
	}
	// By value: alice's 3 hits top the list, decoded and matched to rules.
	for _, k := range rep.TopUsed[:5] {
		if k.Entries[0].Value != "alice" || k.Value != 3 || k.Rule != "api.user" || k.Remaining != 7 {
			t.Errorf("top key %+v, want alice with 3 hits and 7 remaining", k)
		}
	}
}

package inspect

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/internal/rulestest"
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

// counters writes, through the real Redis backend, 3 hits on each limit
// of user=alice (one key per algorithm), 1 on user=bob,path=/x (hash tag)
// and 1 on a long user value (a digest), and returns the rules.
func counters(t *testing.T, b *redisalgo.Backend) *rules.Snapshot {
	t.Helper()
	snap := rulestest.Snapshot(t, "api.yaml", testRules, rules.Options{})
	var checks []algo.Check
	add := func(hits int64, kv ...string) {
		var entries []algo.Entry
		for i := 0; i < len(kv); i += 2 {
			entries = append(entries, algo.Entry{Key: kv[i], Value: kv[i+1]})
		}
		r := snap.Match("api", entries)
		for _, l := range r.Limits {
			checks = append(checks, algo.Check{Domain: "api", Entries: entries, HashTag: r.HashTag, Policy: l.Policy, Hits: hits})
		}
	}
	add(3, "user", "alice")
	add(1, "user", "bob", "path", "/x")
	add(1, "user", strings.Repeat("u", 100))
	for _, c := range checks {
		if _, err := b.Apply(context.Background(), time.Now(), []algo.Check{c}); err != nil {
			t.Fatal(err)
		}
	}
	return snap
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

func TestInspect(t *testing.T) {
	for _, tc := range []struct {
		name    string
		masters int
		setup   func(t *testing.T) (Masters, *redisalgo.Backend, redis.UniversalClient)
	}{
		{"standalone", 1, func(t *testing.T) (Masters, *redisalgo.Backend, redis.UniversalClient) {
			c := redistest.Standalone(t).Client(t)
			// An LFU policy makes the most-used list rank by OBJECT FREQ.
			if err := c.ConfigSet(context.Background(), "maxmemory-policy", "allkeys-lfu").Err(); err != nil {
				t.Fatal(err)
			}
			b, err := redisalgo.New(c, redisalgo.Options{KeyPrefix: "pre:"})
			if err != nil {
				t.Fatal(err)
			}
			return Single{Client: c}, b, c
		}},
		{"cluster", 3, func(t *testing.T) (Masters, *redisalgo.Backend, redis.UniversalClient) {
			c := redistest.SharedCluster(t).ClusterClient(t)
			b, err := redisalgo.NewCluster(c, redisalgo.Options{KeyPrefix: "pre:"})
			if err != nil {
				t.Fatal(err)
			}
			return c, b, c
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			m, b, client := tc.setup(t)
			t.Cleanup(b.Close)
			snap := counters(t, b)
			if err := client.Set(ctx, "someone-else:{api:user:alice:f2s}", "x", time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			before := writes(t, m)
			rep, err := Run(ctx, m, Options{KeyPrefix: "pre:", Count: 3, Rules: snap, Top: 3})
			if err != nil {
				t.Fatal(err)
			}
			if after := writes(t, m); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("inspect wrote: before %v, after %v", before, after)
			}
			checkReport(t, rep, tc.masters, tc.name == "standalone")

			partial, err := Run(ctx, m, Options{KeyPrefix: "pre:", Count: 1, MaxKeys: 2})
			if err != nil {
				t.Fatal(err)
			}
			if !partial.Partial || partial.Scanned != 2 || partial.Ours+partial.Foreign != 2 {
				t.Errorf("--max-keys 2: partial %v, scanned %d, read %d", partial.Partial, partial.Scanned, partial.Ours+partial.Foreign)
			}
			var text bytes.Buffer
			if err := WriteText(&text, rep); err != nil || !strings.Contains(text.String(), "11 envoy-rls") || !strings.Contains(text.String(), "1 foreign") {
				t.Errorf("text report (%v):\n%s", err, text.String())
			}
		})
	}
}

func checkReport(t *testing.T, rep *Report, masters int, lfu bool) {
	t.Helper()
	// 5 limits of alice, 1 of bob, 5 of the long user: 11 keys, one foreign.
	if rep.Masters != masters || rep.Ours != 11 || rep.Foreign != 1 || rep.Unreadable != 0 || rep.Partial || rep.MemoryBytes <= 0 {
		t.Fatalf("report: masters %d, ours %d, foreign %d, unreadable %d, partial %v, memory %d",
			rep.Masters, rep.Ours, rep.Foreign, rep.Unreadable, rep.Partial, rep.MemoryBytes)
	}
	if len(rep.Domains) != 1 || rep.Domains[0].Name != "api" || rep.Domains[0].Keys != 11 {
		t.Errorf("domains %+v", rep.Domains)
	}
	var ruleNames []string
	for _, g := range rep.Rules {
		ruleNames = append(ruleNames, fmt.Sprintf("%s:%d", g.Name, g.Keys))
	}
	sort.Strings(ruleNames)
	want := []string{"api.user.path:1", "api.user:5", "api[user] fixed_window/1h0m0s:1", "api[user] gcra/1h0m0s:1", "api[user] sliding_log/1h0m0s:1", "api[user] sliding_window/1h0m0s:1", "api[user] token_bucket/1h0m0s:1"}
	if fmt.Sprint(ruleNames) != fmt.Sprint(want) {
		t.Errorf("rules %v, want %v (the digest keys by shape)", ruleNames, want)
	}
	expiring := 0
	for _, b := range rep.TTL[:len(rep.TTL)-1] {
		expiring += b.Keys
	}
	if expiring != 11 {
		t.Errorf("TTL distribution %+v, want all 11 keys under a day", rep.TTL)
	}
	all := append(append([]Key{}, rep.Largest...), rep.TopUsed...)
	if len(rep.Largest) != 3 || len(rep.TopUsed) != 3 {
		t.Errorf("largest %d, top %d, want 3 each", len(rep.Largest), len(rep.TopUsed))
	}
	for _, k := range all {
		if k.Domain != "api" || k.TTLMS <= 0 || k.MemoryBytes <= 0 || len(k.Entries) == 0 || k.Entries[0].Key != "user" {
			t.Errorf("key %+v", k)
		}
	}
	if lfu {
		if !rep.LFU || rep.TopBy != "freq" || rep.TopUsed[0].Freq <= 0 {
			t.Errorf("LFU %v, top by %s, top freq %d; want ranking by OBJECT FREQ", rep.LFU, rep.TopBy, rep.TopUsed[0].Freq)
		}
		return
	}
	// By value: alice's 3 hits top the list, decoded and matched to rules.
	for _, k := range rep.TopUsed {
		if k.Entries[0].Value != "alice" || k.Value != 3 || k.Rule != "api.user" || k.Remaining != 7 {
			t.Errorf("top key %+v, want alice with 3 hits and 7 remaining", k)
		}
	}
}

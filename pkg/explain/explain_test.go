package explain

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/internal/rulestest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/redisalgo"
	"github.com/envoy-rls/envoy-rls/pkg/redisclient"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
	"github.com/envoy-rls/envoy-rls/pkg/stack"
)

func TestMain(m *testing.M) { redistest.Main(m) }

const testRules = `domain: api
descriptors:
  - key: user
    value: vip
    rate_limit: {name: vip, unit: minute, requests_per_unit: 100}
  - key: user
    value: "a*"
    rate_limits:
      - {name: per_user, unit: minute, requests_per_unit: 4, algorithm: ALGO}
  - key: user
    rate_limit: {name: any_user, unit: hour, requests_per_unit: 1000}
    descriptors:
      - key: path
        hash_tag: user
        rate_limit: {unit: second, requests_per_unit: 2, algorithm: token_bucket, burst: 3}
  - key: internal
    rate_limit: {unlimited: true}
`

func snapshot(t *testing.T, algorithm algo.Algorithm) *rules.Snapshot {
	t.Helper()
	return rulestest.Snapshot(t, "api.yaml", strings.Replace(testRules, "ALGO", algorithm.String(), 1), rules.Options{})
}

func req(domain string, descs ...string) Request {
	r := Request{Domain: domain}
	for _, d := range descs {
		var es []Entry
		for _, kv := range strings.Split(d, ",") {
			k, v, _ := strings.Cut(kv, "=")
			es = append(es, Entry{Key: k, Value: v})
		}
		r.Descriptors = append(r.Descriptors, es)
	}
	return r
}

// halve is a LimitAdjuster that halves every limit, as a runtime override
// would.
type halve struct{}

func (halve) AdjustLimit(_ time.Time, _ string, _ *rules.Rule, _ *rules.Limit, p algo.Policy) algo.Policy {
	p.Limit /= 2
	return p
}

func (halve) String() string { return "override factor 0.5" }

func TestExplainOffline(t *testing.T) {
	snap := snapshot(t, algo.GCRA)
	e := &Explainer{Rules: func() *rules.Snapshot { return snap }, KeyPrefix: "pre:"}
	rep, err := e.Explain(context.Background(), req("api", "user=alice", "user=bob,path=/x", "internal=1", "nope=1"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Live || len(rep.Descriptors) != 4 || rep.Source != "file:api.yaml" {
		t.Fatalf("report %+v", rep)
	}
	alice := rep.Descriptors[0]
	if alice.Rule == nil || alice.Rule.Path != "api.user_a*" || alice.Limits[0].Name != "per_user" || alice.Rule.File != "api.yaml" || alice.Rule.Line != 6 {
		t.Fatalf("alice matched %+v", alice.Rule)
	}
	if c := alice.Levels[0].Candidates; len(c) != 2 || c[0].Kind != rules.KindWildcard || !c[0].Chosen || c[1].Kind != rules.KindKey || c[1].RuleID != "any_user" {
		t.Errorf("alice's candidates %+v, want the wildcard chosen over the key", c)
	}
	l := alice.Limits[0]
	check := algo.Check{Domain: "api", Entries: []algo.Entry{{Key: "user", Value: "alice"}}, HashTag: -1, Policy: algo.Policy{Algorithm: algo.GCRA, Limit: 4, Period: algo.Minute, Burst: 4}}
	wantKey := "pre:" + string(redisalgo.AppendKey(nil, check, redisalgo.DefaultCounterHashes))
	if l.Algorithm != "gcra" || l.Effective.Limit != 4 || l.Effective.Source != "config" || l.Key != wantKey || l.Slot != redisalgo.KeySlot([]byte(wantKey)) || l.State != nil {
		t.Errorf("alice's limit %+v, want gcra 4 from config at key %q", l, wantKey)
	}
	bob := rep.Descriptors[1]
	if bob.Rule == nil || bob.Rule.Path != "api.user.path" || len(bob.Limits) != 1 || bob.Limits[0].HashTag != "user" || bob.Limits[0].Burst != 3 {
		t.Errorf("bob %+v", bob)
	}
	if d := rep.Descriptors[2]; d.Rule == nil || !d.Rule.Unlimited || len(d.Limits) != 0 {
		t.Errorf("internal %+v, want unlimited", d)
	}
	if d := rep.Descriptors[3]; d.Rule != nil || !strings.Contains(d.NoMatch, "no descriptor matches") {
		t.Errorf("nope %+v, want no match", d)
	}
	var text bytes.Buffer
	if err := WriteText(&text, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"rules from file:api.yaml", "rule api.user_a* (api.yaml:6)", "* chosen wildcard user=a*", "beaten key      user (api.yaml:10)", "redis key: " + wantKey, "no limit: no descriptor matches"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text output lacks %q:\n%s", want, text.String())
		}
	}
}

// TestExplainTextKey: the text names each limit's counter as the JSON
// does: a fixed window's hash and its field in it (untagged and hash
// tagged, with the deployment's counter-hash count), any other
// algorithm's key alone; with its slot and hash tag.
func TestExplainTextKey(t *testing.T) {
	const keyRules = `domain: api
descriptors:
  - key: user
    rate_limits:
      - {name: per_minute, unit: minute, requests_per_unit: 4, algorithm: fixed_window}
      - {name: per_hour, unit: hour, requests_per_unit: 40, algorithm: gcra}
    descriptors:
      - key: path
        hash_tag: user
        rate_limit: {name: per_path, unit: second, requests_per_unit: 2, algorithm: fixed_window}
`
	snap := rulestest.Snapshot(t, "api.yaml", keyRules, rules.Options{})
	at := time.Date(2026, 12, 2, 8, 0, 30, 0, time.UTC)
	const hashes = 5
	e := &Explainer{Rules: func() *rules.Snapshot { return snap }, KeyPrefix: "pre:", CounterHashes: hashes, Now: func() time.Time { return at }}
	user := []algo.Entry{{Key: "user", Value: "alice"}}
	path := append(append([]algo.Entry{}, user...), algo.Entry{Key: "path", Value: "/x"})
	for _, tc := range []struct {
		name  string
		desc  string
		check algo.Check
		tag   string
		field bool
	}{
		{"fixed window", "user=alice", algo.Check{Domain: "api", Entries: user, HashTag: -1, Policy: algo.Policy{Algorithm: algo.FixedWindow, Limit: 4, Period: algo.Minute}}, "", true},
		{"gcra", "user=alice", algo.Check{Domain: "api", Entries: user, HashTag: -1, Policy: algo.Policy{Algorithm: algo.GCRA, Limit: 40, Period: algo.Hour, Burst: 40}}, "", false},
		{"fixed window, hash tag", "user=alice,path=/x", algo.Check{Domain: "api", Entries: path, HashTag: 0, Policy: algo.Policy{Algorithm: algo.FixedWindow, Limit: 2, Period: algo.Second}}, "user", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, field := redisalgo.CounterAt("pre:", tc.check, at.UnixMicro(), hashes)
			if (field != "") != tc.field {
				t.Fatalf("CounterAt gave field %q for %s", field, tc.name)
			}
			want := "    redis key: " + key
			if field != "" {
				want += " field " + field
			}
			want += fmt.Sprintf(" (slot %d", redisalgo.KeySlot([]byte(key)))
			if tc.tag != "" {
				want += ", hash tag " + tc.tag
			}
			want += ")\n"
			rep, err := e.Explain(context.Background(), req("api", tc.desc))
			if err != nil {
				t.Fatal(err)
			}
			var text strings.Builder
			if err := WriteText(&text, rep); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(text.String(), want) {
				t.Errorf("text lacks %q:\n%s", want, text.String())
			}
		})
	}
}

func TestExplainEffective(t *testing.T) {
	snap := snapshot(t, algo.FixedWindow)
	e := &Explainer{
		Rules: func() *rules.Snapshot { return snap },
		Effective: func(now time.Time, domain string, r *rules.Rule, l *rules.Limit) rls.Effective {
			return rls.EffectiveLimit([]rls.LimitAdjuster{halve{}}, now, domain, r, l)
		},
	}
	rep, err := e.Explain(context.Background(), req("api", "user=alice"))
	if err != nil {
		t.Fatal(err)
	}
	if l := rep.Descriptors[0].Limits[0]; l.RequestsPerUnit != 4 || l.Effective.Limit != 2 || l.Effective.RequestsPerUnit != 2 || l.Effective.Source != "override factor 0.5" {
		t.Errorf("limit %+v, want 4 configured, 2 effective from the override", l)
	}
}

// TestExplainQuotas: with a Quotas source, each descriptor shows the RLQS
// assignments of its bucket, in JSON and in the text form.
func TestExplainQuotas(t *testing.T) {
	snap := snapshot(t, algo.FixedWindow)
	var asked []algo.Entry
	e := &Explainer{
		Rules: func() *rules.Snapshot { return snap },
		Quotas: func(domain string, entries []algo.Entry) []QuotaAssignment {
			asked = entries
			return []QuotaAssignment{{Instance: "edge-1", Kind: "token_bucket", TokensPerFill: 2, FillIntervalS: 60, MaxTokens: 2, Instances: 2, Expires: "2027-01-01T00:00:00Z"}}
		},
	}
	rep, err := e.Explain(context.Background(), req("api", "user=alice"))
	if err != nil {
		t.Fatal(err)
	}
	if len(asked) != 1 || asked[0] != (algo.Entry{Key: "user", Value: "alice"}) {
		t.Errorf("Quotas asked for %v, want the descriptor's entries", asked)
	}
	if q := rep.Descriptors[0].Quotas; len(q) != 1 || q[0].Instance != "edge-1" {
		t.Fatalf("quotas %+v, want edge-1's", q)
	}
	var b strings.Builder
	if err := WriteText(&b, rep); err != nil {
		t.Fatal(err)
	}
	if want := "rlqs edge-1: token bucket 2 per 60s, max 2 (of 2 instances)"; !strings.Contains(b.String(), want) {
		t.Errorf("text %q lacks %q", b.String(), want)
	}
}

func TestExplainBadRequest(t *testing.T) {
	snap := snapshot(t, algo.FixedWindow)
	e := &Explainer{Rules: func() *rules.Snapshot { return snap }}
	for _, r := range []Request{{}, {Domain: "api"}, {Domain: "api", Descriptors: [][]Entry{{}}}} {
		if _, err := e.Explain(context.Background(), r); err == nil || !strings.HasPrefix(err.Error(), "explain: ") {
			t.Errorf("Explain(%+v) = %v, want an explain: error", r, err)
		}
	}
}

// TestExplainLiveReadsWithoutConsuming: live, the state is the counter's
// and explaining it any number of times consumes nothing, on the
// in-process store and on Redis standalone and Cluster; over HTTP too.
func TestExplainLiveReadsWithoutConsuming(t *testing.T) {
	for _, tc := range []struct {
		name  string
		redis func(t *testing.T) *redisclient.Client
	}{
		{"memory", func(*testing.T) *redisclient.Client { return nil }},
		{"standalone", func(t *testing.T) *redisclient.Client {
			return &redisclient.Client{Single: redistest.SharedStandalone(t).Client(t)}
		}},
		{"cluster", func(t *testing.T) *redisclient.Client {
			return &redisclient.Client{Cluster: redistest.SharedCluster(t).ClusterClient(t)}
		}},
	} {
		for _, a := range algo.Algorithms {
			t.Run(tc.name+"/"+a.String(), func(t *testing.T) {
				explainLive(t, tc.redis(t), a)
			})
		}
	}
}

func explainLive(t *testing.T, client *redisclient.Client, a algo.Algorithm) {
	ctx := context.Background()
	prefix := redistest.KeyPrefix(t)
	st, err := stack.New(ctx, stack.Config{Redis: client, Timeout: 10 * time.Second, KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	snap := snapshot(t, a)
	e := &Explainer{Rules: func() *rules.Snapshot { return snap }, Peeker: st, KeyPrefix: prefix}
	user := "a" + strings.ReplaceAll(t.Name(), "/", "_") // matches "a*"; distinct per test
	r := req("api", "user="+user)
	pol := snap.Match("api", []algo.Entry{{Key: "user", Value: user}}).Limits[0].Policy
	c := algo.Check{Domain: "api", Entries: []algo.Entry{{Key: "user", Value: user}}, HashTag: -1, Policy: pol, Hits: 1}
	if _, err := st.Apply(ctx, time.Now(), []algo.Check{c}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(Handler(e))
	t.Cleanup(srv.Close)
	var dump string
	for i := range 3 {
		rep := explainHTTP(t, srv.URL, r)
		l := rep.Descriptors[0].Limits[0]
		if !rep.Live || l.State == nil || !l.State.Exists || l.State.Remaining != 3 || l.State.TTLMS <= 0 {
			t.Fatalf("explain %d: limit %+v state %+v, want a live counter with remaining 3", i, l, l.State)
		}
		// A sliding window shows its sub-window counts: the one hit, in
		// the current sub-window.
		if a == algo.SlidingWindow && (l.SubWindows != algo.DefaultSubWindows || fmt.Sprint(l.State.Raw.SubWindows) != "[1]") {
			t.Fatalf("explain %d: %d sub-windows, counts %v; want %d and [1]", i, l.SubWindows, l.State.Raw.SubWindows, algo.DefaultSubWindows)
		}
		if client == nil {
			continue
		}
		// A fixed window's key is its window's hash, and the field there
		// holds the one hit.
		if a == algo.FixedWindow {
			v, err := client.Universal().HGet(ctx, l.Key, l.Field).Result()
			if l.Field == "" || err != nil || v != "1" {
				t.Fatalf("explain %d: HGET %s %q: %q, %v; want the counter's 1 hit", i, l.Key, l.Field, v, err)
			}
		} else if l.Field != "" {
			t.Fatalf("explain %d: a %s limit with field %q", i, a, l.Field)
		}
		d, err := client.Universal().Dump(ctx, l.Key).Result()
		if err != nil {
			t.Fatalf("DUMP %s: %v", l.Key, err)
		}
		if i > 0 && d != dump {
			t.Fatalf("explain %d changed the value of %s", i, l.Key)
		}
		dump = d
	}
	// Nothing consumed: exactly the 3 left are admitted.
	for i := range 4 {
		ds, err := st.Apply(ctx, time.Now(), []algo.Check{c})
		if err != nil {
			t.Fatal(err)
		}
		if ds[0].Allowed != (i < 3) {
			t.Fatalf("hit %d after explaining: %+v", i+1, ds[0])
		}
	}
	// A charge of 3 past the spent limit (cost: charge) overdraws it by 3,
	// and explain says so.
	charge := c
	charge.Hits, charge.Charge = 3, true
	if _, err := st.Apply(ctx, time.Now(), []algo.Check{charge}); err != nil {
		t.Fatal(err)
	}
	if l := explainHTTP(t, srv.URL, r).Descriptors[0].Limits[0]; l.State == nil || l.State.Allowed || l.State.Overdraft != 3 || l.State.Remaining != -3 {
		t.Fatalf("after a charge of 3 past the limit: state %+v, want denied and overdrawn by 3", l.State)
	}
}

func explainHTTP(t *testing.T, url string, r Request) *Report {
	t.Helper()
	body, _ := json.Marshal(r)
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST: HTTP %d", resp.StatusCode)
	}
	var rep Report
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		t.Fatal(err)
	}
	return &rep
}

func TestHandlerRefusesBadRequests(t *testing.T) {
	snap := snapshot(t, algo.FixedWindow)
	srv := httptest.NewServer(Handler(&Explainer{Rules: func() *rules.Snapshot { return snap }}))
	t.Cleanup(srv.Close)
	for _, body := range []string{"{", `{"domain":"api","descriptors":[],"x":1}`, `{"domain":"","descriptors":[[{"key":"a","value":"b"}]]}`} {
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var e struct{ Error string }
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.HasPrefix(e.Error, "explain: ") {
			t.Errorf("POST %s: HTTP %d %q, want 400 with an explain: error", body, resp.StatusCode, e.Error)
		}
	}
}

package redisalgo

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// luaT0 is an epoch-aligned test time in µs.
const luaT0 int64 = 1_700_000_000_000_000

// luaApply runs apply.lua once and decodes its reply.
func luaApply(t testing.TB, client redis.Scripter, keys []string, now int64, checks []algo.Check) (evalNow int64, allowed bool, out []algo.Decision) {
	t.Helper()
	return luaApplyWith(t, applyScript, client, keys, now, checks)
}

// luaApplyWith is luaApply of script, apply.lua or a variant of it.
func luaApplyWith(t testing.TB, script *redis.Script, client redis.Scripter, keys []string, now int64, checks []algo.Check) (evalNow int64, allowed bool, out []algo.Decision) {
	t.Helper()
	out = make([]algo.Decision, len(checks))
	reply, err := script.Run(context.Background(), client, keys, appendApplyArgs(nil, now, checks)...).Result()
	if err != nil {
		t.Fatalf("apply.lua: %v", err)
	}
	evalNow, allowed, err = parseApplyReply(reply, out)
	if err != nil {
		t.Fatal(err)
	}
	return evalNow, allowed, out
}

// luaKeys returns n distinct keys private to the test.
func luaKeys(t testing.TB, n int) []string {
	prefix := redistest.KeyPrefix(t)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%slimit%d", prefix, i)
	}
	return keys
}

func TestAppendApplyArgs(t *testing.T) {
	checks := []algo.Check{
		{Policy: algo.Policy{Algorithm: algo.GCRA, Limit: 10, Period: algo.Minute, Burst: 20}, Hits: 3},
		{Policy: algo.Policy{Algorithm: algo.FixedWindow, Limit: 5, Period: algo.Second}, Hits: 2, Refund: true},
		{Policy: algo.Policy{Algorithm: algo.TokenBucket, Limit: 7, Period: algo.Hour}, Hits: 1, Take: true},
		{Policy: algo.Policy{Algorithm: algo.SlidingWindow, Limit: 1, Period: algo.Second}, Hits: 0},
	}
	for _, tt := range []struct {
		name string
		now  int64
		want []any
	}{
		{"server time", 0, []any{"x", 4, 5 + 32 + 64, 10, algo.Minute, 20, 3, 1 + 8 + 64, 5, algo.Second, 2, 4 + 16, 7, algo.Hour, 2 + 64, 1, algo.Second, 0, testField}},
		{"given now", 42, []any{"x", -4, 42, 5 + 32 + 64, 10, algo.Minute, 20, 3, 1 + 8 + 64, 5, algo.Second, 2, 4 + 16, 7, algo.Hour, 2 + 64, 1, algo.Second, 0, testField}},
	} {
		if got, want := fmt.Sprint(appendApplyArgs([]any{"x"}, tt.now, checks)), fmt.Sprint(tt.want); got != want {
			t.Errorf("%s: got %s, want %s", tt.name, got, want)
		}
	}
}

func TestParseApplyReply(t *testing.T) {
	good := []any{int64(7), int64(0), int64(1), int64(4), int64(0), int64(0), int64(3), int64(0), int64(0), int64(99), int64(-1), int64(0)}
	out := make([]algo.Decision, 2)
	now, allowed, err := parseApplyReply(good, out)
	if err != nil || now != 7 || allowed || out[0] != (algo.Decision{Allowed: true, Remaining: 4, Granted: 3}) || out[1] != (algo.Decision{ResetAfter: 99, RetryAfter: algo.Never}) {
		t.Fatalf("good reply: %d %v %+v %v", now, allowed, out, err)
	}
	with := func(i int, v any) []any {
		r := append([]any(nil), good...)
		r[i] = v
		return r
	}
	tests := []struct {
		name  string
		reply any
		want  string
		is    error // nil: ErrBadReply
	}{
		{"not_array", "OK", "got string, want an array", nil},
		{"short", good[:11], "11 elements, want 12", nil},
		{"long", append(append([]any(nil), good...), int64(1)), "13 elements, want 12", nil},
		{"now_string", with(0, "7"), "element 0 (now µs) is string 7, want an integer", nil},
		{"now_zero", with(0, int64(0)), "element 0 (now µs) is 0", nil},
		{"status_4", with(1, int64(4)), "element 1 (status) is 4, want 0..3", nil},
		{"status_wrongtype", with(1, int64(statusWrongType)), "WRONGTYPE", ErrWrongType},
		{"status_failed", with(1, int64(statusFailed)), "apply.lua failed on this request", ErrScriptFailed},
		{"allowed_nil", with(7, nil), "element 7 (limit 2 allowed) is <nil>", nil},
		{"reset_negative", with(9, int64(-5)), "element 9 (limit 2 reset_after µs) is -5", nil},
		{"granted_negative", with(11, int64(-1)), "element 11 (limit 2 granted) is -1", nil},
		{"retry_below_never", with(10, int64(-2)), "element 10 (limit 2 retry_after µs) is -2, want -1..", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := tt.is
			if is == nil {
				is = ErrBadReply
			}
			_, _, err := parseApplyReply(tt.reply, make([]algo.Decision, 2))
			if !errors.Is(err, is) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want %q containing %q", err, is, tt.want)
			}
		})
	}
}

func TestScriptArgumentCount(t *testing.T) {
	client := redistest.SharedStandalone(t).Client(t)
	// one is -1, luaT0, then the limit's code, limit and period.
	one := appendApplyArgs(nil, luaT0, []algo.Check{{Policy: algo.Policy{Algorithm: algo.FixedWindow, Limit: 1, Period: algo.Second}, Hits: 1}})
	tests := []struct {
		name string
		keys int
		args []any
	}{
		{"extra_key", 2, one},
		{"missing_key", 0, one},
		{"short_args", 1, one[:len(one)-1]},
		{"n_zero", 0, []any{0}},
		{"n_not_a_number", 1, append([]any{"x"}, one[1:]...)},
		{"now_not_a_number", 1, append([]any{-1, "x"}, one[2:]...)},
		{"now_missing", 1, []any{-1}},
		{"code_not_a_number", 1, append([]any{-1, luaT0, "x"}, one[3:]...)},
		{"code_too_large", 1, append([]any{-1, luaT0, 256}, one[3:]...)},
		{"announced_hits_missing", 1, append([]any{-1, luaT0, 1 + codeHits}, one[3:]...)},
		{"second_request_short", 2, append(append([]any(nil), one...), one[:4]...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys := luaKeys(t, tt.keys)
			err := applyScript.Run(context.Background(), client, keys, tt.args...).Err()
			if err == nil || !strings.Contains(err.Error(), "apply.lua: malformed arguments") {
				t.Fatalf("got %v, want the script's argument error", err)
			}
			// A malformed call writes nothing, not even its well-formed
			// first request.
			if len(keys) > 0 {
				if n, err := client.Exists(context.Background(), keys...).Result(); err != nil || n != 0 {
					t.Fatalf("EXISTS after the malformed call = %d, %v; want 0", n, err)
				}
			}
		})
	}
}

// TestScriptMergedRequests: requests merged into one script call decide
// exactly as the same requests in separate calls, in order, each seeing
// what the ones before it wrote, each all or nothing.
func TestScriptMergedRequests(t *testing.T) {
	client := redistest.SharedStandalone(t).Client(t)
	ctx := context.Background()
	p := algo.Policy{Algorithm: algo.TokenBucket, Limit: 3, Period: algo.Minute}
	narrow := algo.Policy{Algorithm: algo.FixedWindow, Limit: 1, Period: algo.Minute}
	// Request k: [shared, own k] with hits; the 2nd request's narrow limit
	// denies, so it must consume nothing from shared.
	type req struct {
		checks []algo.Check
		names  []string
	}
	reqs := []req{
		{[]algo.Check{{Policy: p, Hits: 2}, {Policy: narrow, Hits: 1}}, []string{"shared", "narrowA"}},
		{[]algo.Check{{Policy: p, Hits: 1}, {Policy: narrow, Hits: 2}}, []string{"shared", "narrowB"}},
		{[]algo.Check{{Policy: p, Hits: 1}}, []string{"shared"}},
		{[]algo.Check{{Policy: p, Hits: 1}}, []string{"shared"}},
	}
	run := func(prefix string, merged bool) [][]algo.Decision {
		t.Helper()
		var keys []string
		var args []any
		out := make([][]algo.Decision, len(reqs))
		var replies [][]any
		for k, r := range reqs {
			var rk []string
			for _, n := range r.names {
				rk = append(rk, prefix+n)
			}
			if !merged {
				_, _, out[k] = luaApply(t, client, rk, luaT0, r.checks)
				continue
			}
			keys = append(keys, rk...)
			args = appendApplyArgs(args, luaT0, r.checks)
		}
		if !merged {
			return out
		}
		reply, err := applyScript.Run(ctx, client, keys, args...).Slice()
		if err != nil {
			t.Fatal(err)
		}
		for k, r := range reqs {
			n := replySize(len(r.checks))
			if len(reply) < n {
				t.Fatalf("merged reply too short at request %d: %v", k, reply)
			}
			replies = append(replies, reply[:n])
			reply = reply[n:]
			out[k] = make([]algo.Decision, len(r.checks))
			if _, _, err := parseApplyReply(replies[k], out[k]); err != nil {
				t.Fatalf("request %d: %v", k, err)
			}
		}
		if len(reply) != 0 {
			t.Fatalf("%d reply elements left over", len(reply))
		}
		return out
	}
	prefix := redistest.KeyPrefix(t)
	separate, merged := run(prefix+"separate:", false), run(prefix+"merged:", true)
	if fmt.Sprint(separate) != fmt.Sprint(merged) {
		t.Fatalf("merged decisions differ:\n separate %+v\n merged   %+v", separate, merged)
	}
	// 3 tokens: request 1 takes 2, request 2 is denied by narrow and takes
	// none, request 3 takes the last, request 4 is denied.
	if !merged[2][0].Allowed || merged[3][0].Allowed || merged[1][1].Allowed {
		t.Fatalf("merged decisions %+v, want requests 1 and 3 admitted, 2 and 4 denied", merged)
	}
}

// TestScriptRequestErrorIsolated: a request whose key holds another type
// fails alone; the requests merged with it are applied.
func TestScriptRequestErrorIsolated(t *testing.T) {
	client := redistest.SharedStandalone(t).Client(t)
	ctx := context.Background()
	for _, a := range algo.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			keys := luaKeys(t, 3)
			if err := client.LPush(ctx, keys[1], "x").Err(); err != nil {
				t.Fatal(err)
			}
			checks := []algo.Check{{Policy: algo.Policy{Algorithm: a, Limit: 5, Period: algo.Minute}, Hits: 1}}
			var args []any
			for range keys {
				args = appendApplyArgs(args, luaT0, checks)
			}
			reply, err := applyScript.Run(ctx, client, keys, args...).Slice()
			if err != nil || len(reply) != 3*replySize(1) {
				t.Fatalf("reply %v, %v", reply, err)
			}
			for k := range keys {
				out := make([]algo.Decision, 1)
				_, allowed, err := parseApplyReply(reply[k*replySize(1):(k+1)*replySize(1)], out)
				if k == 1 {
					if !errors.Is(err, ErrWrongType) {
						t.Fatalf("request on the list key: %v, want ErrWrongType", err)
					}
					continue
				}
				if err != nil || !allowed || out[0].Remaining != 4 {
					t.Fatalf("request %d: %+v %v %v, want allowed with 4 left", k, out, allowed, err)
				}
			}
			if typ, err := client.Type(ctx, keys[1]).Result(); err != nil || typ != "list" {
				t.Fatalf("the list key is now %q (%v)", typ, err)
			}
		})
	}
}

// TestScriptSecondLimitDenies: a request whose second limit denies consumes
// nothing from the first, on Redis as in Go.
func TestScriptSecondLimitDenies(t *testing.T) {
	client := redistest.SharedStandalone(t).Client(t)
	for _, a := range algo.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			keys := luaKeys(t, 2)
			first := algo.Check{Policy: algo.Policy{Algorithm: a, Limit: 10, Period: algo.Second}, Hits: 3}
			second := algo.Check{Policy: algo.Policy{Algorithm: algo.FixedWindow, Limit: 4, Period: algo.Minute}, Hits: 3}
			states := make([]algo.State, 2)
			goOut := make([]algo.Decision, 2)
			now := luaT0 + 123_456

			// The first request fits both; the second exceeds the second limit.
			for i, wantAllowed := range []bool{true, false} {
				_, allowed, out := luaApply(t, client, keys, now, []algo.Check{first, second})
				goAllowed := algo.ApplyAll([]algo.Check{first, second}, states, now, goOut)
				if allowed != wantAllowed || goAllowed != wantAllowed || out[0] != goOut[0] || out[1] != goOut[1] {
					t.Fatalf("request %d: lua %v %+v, go %v %+v, want allowed=%v", i, allowed, out, goAllowed, goOut, wantAllowed)
				}
			}
			if goOut[0].Remaining != 7 || !goOut[0].Allowed {
				t.Fatalf("first limit in the denied request: %+v, want its check-only decision with 7 left", goOut[0])
			}
			check := first
			check.Hits = 0
			_, _, out := luaApply(t, client, keys[:1], now, []algo.Check{check})
			if out[0].Remaining != 7 {
				t.Fatalf("first limit after the denied request: remaining %d on Redis, want 7", out[0].Remaining)
			}
		})
	}
}

// TestScriptServerTime: with now 0 the script reads TIME, and each key's TTL
// is its Expiry at that time.
func TestScriptServerTime(t *testing.T) {
	client := redistest.SharedStandalone(t).Client(t)
	ctx := context.Background()
	keys := luaKeys(t, len(algo.Algorithms))
	checks := make([]algo.Check, len(keys))
	for i, a := range algo.Algorithms {
		checks[i] = algo.Check{Policy: algo.Policy{Algorithm: a, Limit: 7, Period: algo.Hour}, Hits: 2}
	}
	before, err := client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	now, allowed, _ := luaApply(t, client, keys, 0, checks)
	after, err := client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !allowed || now < before.UnixMicro() || now > after.UnixMicro() {
		t.Fatalf("script time %d (allowed %v) not within TIME %d..%d", now, allowed, before.UnixMicro(), after.UnixMicro())
	}
	states := make([]algo.State, len(checks))
	algo.ApplyAll(checks, states, now, make([]algo.Decision, len(checks)))
	for i, key := range keys {
		ttl, err := client.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		want := (storedExpiry(checks[i].Policy, states[i], now) + 999) / 1000
		// PTTL only falls after the script; a minute of slack keeps this
		// free of timing assumptions.
		if got := ttl.Milliseconds(); got > want || got < want-60_000 {
			t.Errorf("%v: PTTL %dms, want %dms (Expiry rounded up) or a little less", checks[i].Policy.Algorithm, got, want)
		}
	}
}

// TestScriptSlidingLogMembers: several hits in one µs, refunds and more hits
// in that µs keep one member per hit, numbered without gaps.
func TestScriptSlidingLogMembers(t *testing.T) {
	client := redistest.SharedStandalone(t).Client(t)
	keys := luaKeys(t, 1)
	p := algo.Policy{Algorithm: algo.SlidingLog, Limit: 2500, Period: algo.Second}
	steps := []struct {
		hits   int64
		refund bool
		want   int64
	}{{3, false, 3}, {1, true, 2}, {2, false, 4}, {2400, false, 2404}, {500, true, 1904}, {11, false, 1915}}
	for i, st := range steps {
		luaApply(t, client, keys, luaT0+5, []algo.Check{{Policy: p, Hits: st.hits, Refund: st.refund}})
		vals, err := client.ZRangeWithScores(context.Background(), keys[0], 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(vals)) != st.want {
			t.Fatalf("step %d: %d members, want %d", i, len(vals), st.want)
		}
		for n, v := range vals {
			if want := fmt.Sprintf("%d:%06d", luaT0+5, n); v.Member != want || v.Score != float64(luaT0+5) {
				t.Fatalf("step %d: member %d is %v (score %v), want %s", i, n, v.Member, v.Score, want)
			}
		}
	}
}

// TestScriptGCRAValue: gcra and token_bucket store their exact TAT in one
// string, "<t>" when the fraction is 0 and "<t>:<f>" otherwise, and decide
// alike (at 3 per second, a burst of 3 at one instant passes whole).
func TestScriptGCRAValue(t *testing.T) {
	client := redistest.SharedStandalone(t).Client(t)
	ctx := context.Background()
	keys := luaKeys(t, 2)
	gcra := algo.Policy{Algorithm: algo.GCRA, Limit: 3, Period: algo.Second}
	bucket := gcra
	bucket.Algorithm = algo.TokenBucket
	steps := []struct {
		at        int64
		hits      int64
		refund    bool
		remaining int64
		value     string // the gcra key's value afterwards, relative to luaT0
	}{
		{at: 0, hits: 1, remaining: 2, value: "333333:1"},
		{at: 0, hits: 1, remaining: 1, value: "666666:2"},
		{at: 0, hits: 1, remaining: 0, value: "1000000"},
		{at: 1, hits: 1, remaining: 0, value: "1000000"}, // denied
		{at: 1, hits: 1, refund: true, remaining: 1, value: "666666:2"},
		{at: 2, hits: 1, remaining: 0, value: "1000000"},
	}
	for i, st := range steps {
		c := algo.Check{Policy: gcra, Hits: st.hits, Refund: st.refund}
		_, _, g := luaApply(t, client, keys[:1], luaT0+st.at, []algo.Check{c})
		c.Policy = bucket
		_, _, b := luaApply(t, client, keys[1:], luaT0+st.at, []algo.Check{c})
		if g[0] != b[0] || g[0].Remaining != st.remaining {
			t.Fatalf("step %d: gcra %+v, token_bucket %+v, want remaining %d", i, g[0], b[0], st.remaining)
		}
		tat, frac, _ := strings.Cut(st.value, ":")
		rel, _ := strconv.ParseInt(tat, 10, 64)
		want := strconv.FormatInt(luaT0+rel, 10)
		if frac != "" {
			want += ":" + frac
		}
		for k, name := range []string{"gcra", "token_bucket"} {
			got, err := client.Get(ctx, keys[k]).Result()
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("step %d: %s value %q, want %q", i, name, got, want)
			}
		}
	}
}

// TestRequestErrorsAreRedisErrors: a request's WRONGTYPE or script failure
// inside a merged call is a Redis error reply to callers, as the same error
// of a call of its own was.
func TestRequestErrorsAreRedisErrors(t *testing.T) {
	for _, err := range []error{ErrWrongType, ErrScriptFailed} {
		var redisErr redis.Error
		if wrapped := fmt.Errorf("redisalgo: %w", err); !errors.As(wrapped, &redisErr) {
			t.Errorf("%v is not a redis.Error", err)
		}
	}
}

// TestWindowValue pins the stored spelling of fixed_window and
// sliding_window states (the apply.lua header): packed into one integer,
// which Redis keeps inside its 16-byte object (OBJECT ENCODING "int"), so
// that a window key costs no more than envoyproxy/ratelimit's counter;
// counts too long for one length digit fall back to ':'. A check-only step
// afterwards must decide as Go does from the same history, so the value
// also reads back.
func TestWindowValue(t *testing.T) {
	client := redistest.SharedStandalone(t).Client(t)
	ctx := context.Background()
	type hit struct {
		at     int64 // µs after luaT0
		hits   int64
		refund bool
	}
	big := int64(1_000_000_007) // 10 digits
	tests := []struct {
		name     string
		p        algo.Policy
		hits     []hit
		value    string
		encoding string
	}{
		// A fixed window's hash names its window: the field's value is
		// the count, in a compact hash.
		{name: "fixed second", p: algo.Policy{Algorithm: algo.FixedWindow, Limit: 10, Period: algo.Second},
			hits: []hit{{0, 3, false}}, value: "3", encoding: "listpack"},
		{name: "fixed minute", p: algo.Policy{Algorithm: algo.FixedWindow, Limit: 100, Period: algo.Minute},
			hits: []hit{{0, 12, false}}, value: "12", encoding: "listpack"},
		{name: "fixed 7µs", p: algo.Policy{Algorithm: algo.FixedWindow, Limit: 10, Period: 7},
			hits: []hit{{0, 1, false}}, value: "1", encoding: "listpack"},
		{name: "fixed count of 10 digits", p: algo.Policy{Algorithm: algo.FixedWindow, Limit: 2 * big, Period: algo.Second},
			hits: []hit{{0, big, false}}, value: "1000000007", encoding: "listpack"},
		{name: "sliding both counts", p: algo.Policy{Algorithm: algo.SlidingWindow, Limit: 100, Period: algo.Second},
			hits: []hit{{0, 5, false}, {algo.Second, 17, false}}, value: "170000000117521", encoding: "int"},
		{name: "sliding previous only", p: algo.Policy{Algorithm: algo.SlidingWindow, Limit: 100, Period: algo.Second},
			hits: []hit{{0, 5, false}, {algo.Second, 1, true}}, value: "1700000001501", encoding: "int"},
		{name: "sliding current only", p: algo.Policy{Algorithm: algo.SlidingWindow, Limit: 100, Period: algo.Minute},
			hits: []hit{{0, 40, false}}, value: "283333334020", encoding: "int"},
		{name: "sliding count of 10 digits", p: algo.Policy{Algorithm: algo.SlidingWindow, Limit: 2 * big, Period: algo.Second},
			hits: []hit{{0, big, false}, {algo.Second, 3, false}}, value: "1700000001:3:1000000007", encoding: "embstr"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.p.Validate(); err != nil {
				t.Fatal(err)
			}
			key := fmt.Sprintf("%s%d", redistest.KeyPrefix(t), i)
			states := []algo.State{{}}
			goOut := make([]algo.Decision, 1)
			for _, h := range tt.hits {
				c := []algo.Check{{Policy: tt.p, Hits: h.hits, Refund: h.refund}}
				// Padded TTLs: the 7 µs window's 1 ms TTL would run out
				// on Redis's clock before the value is read; the test's
				// clock decides here.
				_, _, luaOut := luaApplyWith(t, paddedApply, client, []string{windowKey(key, tt.p, luaT0+h.at)}, luaT0+h.at, c)
				algo.ApplyAll(c, states, luaT0+h.at, goOut)
				if luaOut[0] != goOut[0] {
					t.Fatalf("at +%dµs: lua %+v, go %+v", h.at, luaOut[0], goOut[0])
				}
			}
			written := windowKey(key, tt.p, luaT0+tt.hits[len(tt.hits)-1].at)
			read := client.Get(ctx, written)
			if tt.p.KeyedWindow() {
				read = client.HGet(ctx, written, testField)
			}
			if got, err := read.Result(); err != nil || got != tt.value {
				t.Errorf("value %q (%v), want %q", got, err, tt.value)
			}
			if got, err := client.ObjectEncoding(ctx, written).Result(); err != nil || got != tt.encoding {
				t.Errorf("OBJECT ENCODING %q (%v), want %q", got, err, tt.encoding)
			}
			last := tt.hits[len(tt.hits)-1].at + 1
			c := []algo.Check{{Policy: tt.p}}
			_, _, luaOut := luaApply(t, client, []string{windowKey(key, tt.p, luaT0+last)}, luaT0+last, c)
			algo.ApplyAll(c, states, luaT0+last, goOut)
			if luaOut[0] != goOut[0] {
				t.Errorf("check-only after: lua %+v, go %+v (the value read back wrong)", luaOut[0], goOut[0])
			}
		})
	}
}

// TestWindowValueUnreadable: a window value apply.lua did not write (an
// operator's SET, say) reads as no key rather than failing the request.
func TestWindowValueUnreadable(t *testing.T) {
	client := redistest.SharedStandalone(t).Client(t)
	ctx := context.Background()
	for i, v := range []string{"garbage", "12:x", "-", "1:2:3:4", "17000000013a"} {
		for _, a := range []algo.Algorithm{algo.FixedWindow, algo.SlidingWindow} {
			key := fmt.Sprintf("%s%d:%v", redistest.KeyPrefix(t), i, a)
			var err error
			if a == algo.FixedWindow {
				err = client.HSet(ctx, key, testField, v).Err()
			} else {
				err = client.Set(ctx, key, v, time.Minute).Err()
			}
			if err != nil {
				t.Fatal(err)
			}
			p := algo.Policy{Algorithm: a, Limit: 10, Period: algo.Second}
			_, allowed, out := luaApply(t, client, []string{key}, luaT0, []algo.Check{{Policy: p}})
			if !allowed || out[0].Remaining != 10 {
				t.Errorf("%v value %q: allowed %v, %+v; want the full limit, as no key", a, v, allowed, out[0])
			}
		}
	}
}

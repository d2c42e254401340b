package budget

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/envoy-rls/envoy-rls/internal/testkit/envoytest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/eventually"
)

// recorder is a rate-limit service that records every call Envoy makes
// and answers OVER_LIMIT to the ones whose descriptors hold the entry
// (probe, deny): it pins down what Envoy 1.40 sends, not what a service
// does with it.
type recorder struct {
	rlspb.UnimplementedRateLimitServiceServer
	mu    sync.Mutex
	calls []*rlspb.RateLimitRequest
}

func (r *recorder) ShouldRateLimit(_ context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	r.mu.Lock()
	r.calls = append(r.calls, req)
	r.mu.Unlock()
	code := rlspb.RateLimitResponse_OK
	for _, d := range req.GetDescriptors() {
		for _, e := range d.GetEntries() {
			if e.GetKey() == "probe" && e.GetValue() == "deny" {
				code = rlspb.RateLimitResponse_OVER_LIMIT
			}
		}
	}
	return &rlspb.RateLimitResponse{OverallCode: code}, nil
}

// seen lists the calls as lines: each descriptor's probe value, hits
// (how the descriptor's hits_addend arrived: "-" when unset) and a
// trailing "-" when the hits are negative.
func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, c := range r.calls {
		var ds []string
		for _, d := range c.GetDescriptors() {
			v := ""
			for _, e := range d.GetEntries() {
				if e.GetKey() == "probe" {
					v = e.GetValue()
				}
			}
			h := "-"
			if d.GetHitsAddend() != nil {
				h = fmt.Sprint(d.GetHitsAddend().GetValue())
			}
			if d.GetIsNegativeHits() {
				h += " negative"
			}
			ds = append(ds, v+"="+h)
		}
		out = append(out, fmt.Sprintf("request hits_addend=%d [%s]", c.GetHitsAddend(), strings.Join(ds, " ")))
	}
	sort.Strings(out)
	return out
}

func (r *recorder) reset() { r.mu.Lock(); r.calls = nil; r.mu.Unlock() }

func startRecorder(t *testing.T) (*recorder, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	s := grpc.NewServer()
	rlspb.RegisterRateLimitServiceServer(s, r)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return r, l.Addr().String()
}

// probeEntry is one rate_limits entry of the probe route: a generic_key
// (probe, value), sent on the request path or at stream done, with the
// hits_addend given (YAML, "" for none).
func probeEntry(value string, streamDone bool, hits string) string {
	s := fmt.Sprintf("\n                    - actions: [{generic_key: {descriptor_key: probe, descriptor_value: %s}}]", value)
	if streamDone {
		s += "\n                      apply_on_stream_done: true"
	}
	if hits != "" {
		s += "\n                      hits_addend: " + hits
	}
	return s
}

// probeBootstrap is an Envoy whose Lua filter records, on every response,
// the upstream's usage figure in dynamic metadata (probe:num as a Lua
// number, probe:str as a string) and the status (probe:status), before the
// rate-limit filter; its routes carry the given rate_limits entries, by
// path.
func probeBootstrap(routes map[string]string) []byte {
	var rs strings.Builder
	paths := make([]string, 0, len(routes))
	for p := range routes {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		fmt.Fprintf(&rs, `
              - match: {path: %q}
                route: {cluster: llm}
                typed_per_filter_config:
                  envoy.filters.http.ratelimit:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute
                    rate_limits:%s`, p, routes[p])
	}
	return []byte(envoytest.IngressHead + `            - name: all
              domains: ["*"]
              routes:` + rs.String() + `
          http_filters:
          - name: envoy.filters.http.lua
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua
              default_source_code:
                inline_string: |
                  function envoy_on_response(h)
                    local m = h:streamInfo():dynamicMetadata()
                    m:set("probe", "status", tonumber(h:headers():get(":status")))
                    local n = tonumber(h:headers():get("` + tokensHeader + `") or "")
                    if n ~= nil then
                      m:set("probe", "num", n)
                      m:set("probe", "str", tostring(n))
                    end
                  end
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: probe
              timeout: 5s
              failure_mode_deny: false
              rate_limit_service: {transport_api_version: V3, grpc_service: {envoy_grpc: {cluster_name: envoy_rls}}}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
` + testClusters)
}

// TestStreamDoneFacts pins down, against a recording service, what Envoy
// 1.40 sends for the shapes docs/budgets.md builds on; the guide quotes
// these results.
func TestStreamDoneFacts(t *testing.T) {
	rec, recAddr := startRecorder(t)
	up := startLLM(t)
	routes := map[string]string{
		// A number the Lua filter stored as a Lua number, and as a string;
		// a key nobody set; a response header; a header that is absent.
		"/formats": probeEntry("check", false, "{number: 0}") +
			probeEntry("num", true, `{format: "%DYNAMIC_METADATA(probe:num)%"}`) +
			probeEntry("str", true, `{format: "%DYNAMIC_METADATA(probe:str)%"}`) +
			probeEntry("missing", true, `{format: "%DYNAMIC_METADATA(probe:absent)%"}`) +
			probeEntry("resp", true, `{format: "%RESP(`+tokensHeader+`)%"}`) +
			probeEntry("noheader", true, `{format: "%RESP(x-absent)%"}`) +
			probeEntry("refund", true, `{format: "%DYNAMIC_METADATA(probe:str)%", is_negative_hits: true}`) +
			probeEntry("plain", true, ""),
		// The request path denied (the recorder answers OVER_LIMIT): is the
		// stream-done entry sent after the filter's own 429?
		"/denied": probeEntry("deny", false, "") +
			probeEntry("after429", true, `{format: "%DYNAMIC_METADATA(probe:status)%"}`),
		// Only stream-done entries whose metadata is missing: is a call made?
		"/allmissing": probeEntry("ok", false, "{number: 0}") +
			probeEntry("missing", true, `{format: "%DYNAMIC_METADATA(probe:absent)%"}`),
		// The client hangs up before the response: is anything sent at
		// stream done, and does the Lua filter's response code run?
		"/reset": probeEntry("ok", false, "{number: 0}") +
			probeEntry("plain", true, "") +
			probeEntry("status", true, `{format: "%DYNAMIC_METADATA(probe:status)%"}`),
	}
	_, url := startEnvoy(t, "probe", probeBootstrap(routes), []string{recAddr}, up.Addr)

	run := func(path string, wantStatus int, want []string) {
		t.Helper()
		rec.reset()
		c := askPath(url, path, 42)
		if c.Err != nil || c.Status != wantStatus {
			t.Fatalf("%s: status %d (%v), want %d", path, c.Status, c.Err, wantStatus)
		}
		// The stream-done call is fire-and-forget: wait for it, then make
		// sure nothing else follows (a second request flushes it).
		eventually.True(t, path+": the calls Envoy makes", func() (bool, string) {
			got := rec.seen()
			return strings.Join(got, "\n") == strings.Join(want, "\n"), strings.Join(got, "\n")
		})
		time.Sleep(200 * time.Millisecond)
		if got := rec.seen(); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s: Envoy sent\n%s\nwant\n%s", path, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		t.Logf("%s (%d): %s", path, c.Status, strings.Join(rec.seen(), "; "))
	}
	// A number stored as a Lua number or a string formats as the integer;
	// a missing metadata key or header drops that descriptor (Envoy logs
	// "Invalid hits_addend" at warning level, once per request); an entry
	// without hits_addend leaves the descriptor's unset (1 hit).
	run("/formats", 200, []string{
		"request hits_addend=0 [check=0]",
		"request hits_addend=0 [num=42 str=42 resp=42 refund=42 negative plain=-]",
	})
	// Yes: the rate-limit filter's own 429 went through the Lua filter
	// (which stored its status) and its stream-done entry was sent.
	run("/denied", 429, []string{"request hits_addend=0 [after429=429]", "request hits_addend=0 [deny=-]"})
	// When every stream-done descriptor is dropped, no call is made.
	run("/allmissing", 200, []string{"request hits_addend=0 [ok=0]"})

	// A reset before the response: the stream-done entries are sent, but
	// the Lua filter's envoy_on_response never ran, so an entry reading
	// what it sets is dropped.
	rec.reset()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/reset", nil)
	req.Header.Set(delayHeader, "1500")
	if resp, err := httpClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("/reset: answered %d before the client gave up", resp.StatusCode)
	}
	want := []string{"request hits_addend=0 [ok=0]", "request hits_addend=0 [plain=-]"}
	eventually.True(t, "/reset: the calls Envoy makes", func() (bool, string) {
		got := rec.seen()
		return strings.Join(got, "\n") == strings.Join(want, "\n"), strings.Join(got, "\n")
	})
	t.Logf("/reset (client gone): %s", strings.Join(rec.seen(), "; "))
}

// askPath is ask on another path.
func askPath(url, path string, usage int64) call {
	return ask(url+path, nil, usage, 0, 0)
}

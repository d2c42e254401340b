package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// TestJSONEndpoint drives POST /json, the HTTP twin of ShouldRateLimit.
func TestJSONEndpoint(t *testing.T) {
	t.Parallel()
	s := startShop(t)
	const free = `{"domain":"shop","descriptors":[{"entries":[{"key":"plan","value":"free"}]}]}`
	for i, want := range []struct {
		status    int
		code      pb.RateLimitResponse_Code
		remaining uint32
	}{
		{http.StatusOK, pb.RateLimitResponse_OK, 1},
		{http.StatusOK, pb.RateLimitResponse_OK, 0},
		{http.StatusTooManyRequests, pb.RateLimitResponse_OVER_LIMIT, 0},
	} {
		status, body := s.post("/json", free)
		if status != want.status {
			t.Fatalf("request %d: status %d (%s), want %d", i+1, status, body, want.status)
		}
		var resp pb.RateLimitResponse
		if err := protojson.Unmarshal([]byte(body), &resp); err != nil {
			t.Fatalf("request %d: body %q is not a RateLimitResponse: %v", i+1, body, err)
		}
		st := onlyStatus(t, &resp)
		if resp.GetOverallCode() != want.code || st.GetLimitRemaining() != want.remaining || st.GetCurrentLimit().GetRequestsPerUnit() != 2 {
			t.Errorf("request %d: %v, want %v with limit_remaining %d of 2", i+1, &resp, want.code, want.remaining)
		}
		if len(resp.GetResponseHeadersToAdd()) != 0 {
			t.Errorf("request %d: headers %v, want none by default", i+1, resp.GetResponseHeadersToAdd())
		}
	}

	bad := []struct {
		name, body string
		want       string
	}{
		{"not JSON", `{"domain":`, "rls: decode RateLimitRequest"},
		{"unknown field", `{"domian":"shop"}`, "rls: decode RateLimitRequest"},
		{"wrong type", `{"domain":7}`, "rls: decode RateLimitRequest"},
		{"empty domain", `{"descriptors":[{"entries":[{"key":"plan","value":"free"}]}]}`, "domain: must not be empty"},
		{"empty entries", `{"domain":"shop","descriptors":[{}]}`, "descriptors[0].entries: must not be empty"},
	}
	for _, b := range bad {
		status, body := s.post("/json", b.body)
		if status != http.StatusBadRequest || !strings.Contains(body, b.want) {
			t.Errorf("%s: %d %q, want 400 containing %q", b.name, status, body, b.want)
		}
	}
	if status, body := s.get("/json"); status != http.StatusMethodNotAllowed || !strings.Contains(body, "POST") {
		t.Errorf("GET /json: %d %q, want 405 naming POST", status, body)
	}
	// envoyproxy/ratelimit's documented `curl -d` sends a form type: read
	// (the limit is used up by now, so the answer is 429); a browser's
	// cross-site POST is refused, and so is a body that is not JSON.
	for _, tc := range []struct {
		name, body string
		headers    map[string]string
		code       int
		want       string
	}{
		{"curl -d", free, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, http.StatusTooManyRequests, `"overallCode":"OVER_LIMIT"`},
		{"cross-site", free, map[string]string{"Content-Type": "text/plain", "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden, "other sites"},
		{"other origin", free, map[string]string{"Content-Type": "text/plain", "Origin": "https://elsewhere.example"}, http.StatusForbidden, "other sites"},
		{"form body", "domain=shop", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, http.StatusUnsupportedMediaType, "JSON"},
	} {
		req, err := http.NewRequest(http.MethodPost, "http://"+s.HTTPAddr+"/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range tc.headers {
			req.Header.Set(k, v)
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatalf("POST /json %s: %v", tc.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || !strings.Contains(string(b), tc.want) {
			t.Errorf("POST /json %s: %d %q, want %d containing %q", tc.name, resp.StatusCode, b, tc.code, tc.want)
		}
	}
	s.stop()
}

// TestDebugEndpoints checks /healthz and /healthcheck on the HTTP address,
// /debug/config on the debug address and nowhere else, and that pprof is
// off by default.
func TestDebugEndpoints(t *testing.T) {
	t.Parallel()
	s := startShop(t)
	for _, path := range []string{"/healthz", "/healthcheck"} {
		if status, body := s.get(path); status != http.StatusOK {
			t.Errorf("%s: %d %q", path, status, body)
		}
	}
	if status, body := s.get("/debug/config"); status != http.StatusNotFound {
		t.Errorf("/debug/config on the HTTP address the cluster reaches: %d %.100q, want 404", status, body)
	}
	status, body := s.getDebug("/debug/config")
	if status != http.StatusOK {
		t.Fatalf("/debug/config: %d %q", status, body)
	}
	var cfg struct {
		Domains []struct {
			Domain string `json:"domain"`
			Rules  []struct {
				ID     string `json:"id"`
				Limits []struct {
					RequestsPerUnit uint32 `json:"requests_per_unit"`
					Algorithm       string `json:"algorithm"`
				} `json:"limits"`
			} `json:"rules"`
		} `json:"domains"`
	}
	if err := json.Unmarshal([]byte(body), &cfg); err != nil {
		t.Fatalf("/debug/config is not JSON: %v\n%s", err, body)
	}
	got := map[string]string{}
	for _, d := range cfg.Domains {
		for _, r := range d.Rules {
			for _, l := range r.Limits {
				got[d.Domain+"/"+r.ID] = strconv.Itoa(int(l.RequestsPerUnit)) + " " + l.Algorithm
			}
		}
	}
	for id, want := range map[string]string{"shop/per_client": "5 token_bucket", "shop/per_user": "3 sliding_window"} {
		if got[id] != want {
			t.Errorf("/debug/config: %s = %q, want %q; all: %v", id, got[id], want, got)
		}
	}
	if status, _ := s.getDebug("/debug/pprof/"); status != http.StatusNotFound {
		t.Errorf("/debug/pprof/ without --pprof: %d, want 404", status)
	}
	if status, _ := s.getDebug("/metrics"); status != http.StatusNotFound {
		t.Errorf("/metrics on the debug address: %d, want 404", status)
	}
	s.stop()
}

// TestPprofAndHeaders turns on --pprof and every response header.
func TestPprofAndHeaders(t *testing.T) {
	t.Parallel()
	s := startShop(t, "--pprof", "--response-headers=all")
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline"} {
		if status, body := s.getDebug(path); status != http.StatusOK {
			t.Errorf("%s with --pprof: %d %.200q, want 200", path, status, body)
		}
		if status, _ := s.get(path); status != http.StatusNotFound {
			t.Errorf("%s on the HTTP address: %d, want 404 (only on --debug-addr)", path, status)
		}
	}

	headers := func(resp *pb.RateLimitResponse) map[string]string {
		h := map[string]string{}
		for _, hv := range resp.GetResponseHeadersToAdd() {
			h[hv.GetKey()] = hv.GetValue()
		}
		return h
	}
	h := headers(s.ask("shop", desc("client", "hdr")))
	for k, want := range map[string]string{
		"X-RateLimit-Limit":     "5",
		"X-RateLimit-Remaining": "4",
		"RateLimit-Policy":      `"per_client";q=5;w=3600`,
	} {
		if h[k] != want {
			t.Errorf("OK response: header %s = %q, want %q; all: %v", k, h[k], want, h)
		}
	}
	if !strings.HasPrefix(h["RateLimit"], `"per_client";r=4;t=`) {
		t.Errorf("OK response: RateLimit = %q, want \"per_client\";r=4;t=…", h["RateLimit"])
	}
	if _, ok := h["Retry-After"]; ok {
		t.Errorf("OK response carries Retry-After: %v", h)
	}
	for range 4 {
		s.ask("shop", desc("client", "hdr"))
	}
	resp := s.ask("shop", desc("client", "hdr"))
	h = headers(resp)
	if resp.GetOverallCode() != pb.RateLimitResponse_OVER_LIMIT || h["X-RateLimit-Remaining"] != "0" {
		t.Fatalf("6th request: %v, want OVER_LIMIT with X-RateLimit-Remaining 0", resp)
	}
	// One token refills every 720 s.
	if ra, err := strconv.Atoi(h["Retry-After"]); err != nil || ra < 1 || ra > 720 {
		t.Errorf("OVER_LIMIT Retry-After = %q, want whole seconds in [1, 720]", h["Retry-After"])
	}
	// The reset is when the whole bucket is back, whatever the decision:
	// five tokens, an hour.
	if reset, err := strconv.Atoi(h["X-RateLimit-Reset"]); err != nil || reset <= 720 || reset > 3600 {
		t.Errorf("OVER_LIMIT X-RateLimit-Reset = %q, want whole seconds in (720, 3600]", h["X-RateLimit-Reset"])
	}
	s.stop()
}

package rls

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/encoding/protojson"
)

func TestJSONHandler(t *testing.T) {
	s, _ := newTestService(t, twoRules, nil)
	srv := httptest.NewServer(s.JSONHandler())
	defer srv.Close()
	post := func(body string) (int, string) {
		t.Helper()
		resp, err := http.Post(srv.URL, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const b1 = `{"domain":"d","descriptors":[{"entries":[{"key":"b","value":"1"}]}]}`
	for _, tc := range []struct {
		name, body string
		code       int
		contains   string
	}{
		{"ok", b1, http.StatusOK, `"overallCode":"OK"`},
		{"over limit", b1, http.StatusTooManyRequests, `"overallCode":"OVER_LIMIT"`},
		{"not json", `{"domain":`, http.StatusBadRequest, "rls: decode RateLimitRequest"},
		{"unknown field", `{"domain":"d","bogus":1}`, http.StatusBadRequest, `unknown field "bogus"`},
		{"invalid request", `{"domain":"d"}`, http.StatusBadRequest, "descriptors: must not be empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := post(tc.body)
			if code != tc.code || !strings.Contains(body, tc.contains) {
				t.Fatalf("got %d %q, want %d containing %q", code, body, tc.code, tc.contains)
			}
		})
	}
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /json = %d, want 405", resp.StatusCode)
	}
}

// TestJSONHandlerRequests: any Content-Type is read, envoyproxy/ratelimit's
// documented `curl -d` (a form type) included; a browser's cross-site
// request (Sec-Fetch-Site: cross-site, or an Origin not this server's) is
// refused with 403, and a body that is not a JSON object with 415, before
// anything is counted: the accepted requests see the limit of 5 fall by
// one each, whatever was refused before them.
func TestJSONHandlerRequests(t *testing.T) {
	s, _ := newTestService(t, twoRules, nil)
	srv := httptest.NewServer(s.JSONHandler())
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	const body = `{"domain":"d","descriptors":[{"entries":[{"key":"a","value":"ct"}]}]}`
	accepted := 0
	for _, tc := range []struct {
		name    string
		body    string
		headers map[string]string
		code    int
		want    string // in the body of a refusal
	}{
		{name: "curl -d", headers: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, code: http.StatusOK},
		{name: "no type", code: http.StatusOK},
		{name: "text/plain", headers: map[string]string{"Content-Type": "text/plain"}, code: http.StatusOK},
		{name: "json", headers: map[string]string{"Content-Type": "application/json"}, code: http.StatusOK},
		{name: "cross-site fetch", headers: map[string]string{"Content-Type": "text/plain", "Sec-Fetch-Site": "cross-site"}, code: http.StatusForbidden, want: "Sec-Fetch-Site: cross-site"},
		{name: "other origin", headers: map[string]string{"Origin": "https://evil.example"}, code: http.StatusForbidden, want: `Origin "https://evil.example" is not this server`},
		{name: "null origin", headers: map[string]string{"Origin": "null"}, code: http.StatusForbidden, want: `Origin "null"`},
		{name: "same origin", headers: map[string]string{"Origin": "http://" + host, "Sec-Fetch-Site": "same-origin"}, code: http.StatusOK},
		{name: "form body", body: "domain=d&key=a", headers: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, code: http.StatusUnsupportedMediaType, want: "not one"},
		{name: "JSON array", body: "[]", code: http.StatusUnsupportedMediaType, want: "a JSON RateLimitRequest"},
		{name: "empty", body: " ", code: http.StatusUnsupportedMediaType, want: "a JSON RateLimitRequest"},
	} {
		b := tc.body
		if b == "" {
			b = body
		}
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range tc.headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Fatalf("%s: %d %q, want %d", tc.name, resp.StatusCode, out, tc.code)
		}
		if tc.code != http.StatusOK {
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("%s: %d body %q, want it to contain %q", tc.name, tc.code, out, tc.want)
			}
			continue
		}
		accepted++
		var r pb.RateLimitResponse
		if err := protojson.Unmarshal(out, &r); err != nil {
			t.Fatalf("%s: %q: %v", tc.name, out, err)
		}
		if got, want := r.GetStatuses()[0].GetLimitRemaining(), uint32(5-accepted); got != want {
			t.Errorf("%s: limit_remaining %d, want %d: a refused request consumed quota", tc.name, got, want)
		}
	}
}

// TestJSONHandlerBodyTimeout: a body that stops arriving ends with 408 when
// the server's read deadline passes, instead of a generic 400.
func TestJSONHandlerBodyTimeout(t *testing.T) {
	s, _ := newTestService(t, twoRules, nil)
	srv := httptest.NewUnstartedServer(s.JSONHandler())
	srv.Config.ReadTimeout = 200 * time.Millisecond
	srv.Start()
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	// A bound for a broken server, not a timing assertion: the response is
	// due after 200ms.
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no response to a stalled body: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), "read timeout") {
		t.Fatalf("stalled body: %d %q, want 408 naming the read timeout", resp.StatusCode, b)
	}
}

// TestMetricCardinalityBounded: distinct descriptor values and invented
// domains must not create metric series.
func TestMetricCardinalityBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, _ := newTestService(t, twoRules, func(c *Config) { c.Metrics = NewMetrics(reg) })
	series := func() int {
		t.Helper()
		n, err := testutil.GatherAndCount(reg)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	send := func(i int) {
		call(t, s, request("d", desc("a="+strings.Repeat("x", i%7)+string(rune('a'+i%26))+itoa(i))))
		call(t, s, request("random-domain-"+itoa(i), desc("a=1")))
	}
	for i := range 10 {
		send(i)
	}
	before := series()
	for i := 10; i < 2000; i++ {
		send(i)
	}
	if after := series(); after != before {
		t.Fatalf("metric series grew from %d to %d with distinct values", before, after)
	}
	if got := testutil.ToFloat64(s.cfg.Metrics.requests.WithLabelValues("d", "ok")); got < 10 {
		t.Fatalf("requests_total{domain=d,code=ok} = %v, want counting", got)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

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

// TestJSONHandlerContentType: only application/json is decoded. The types a
// browser may send across sites without a preflight (text/plain, forms,
// multipart) and a missing type are refused before the body is read, so
// they consume no quota: the accepted requests see the limit of 5 fall by
// one each, whatever was refused before them.
func TestJSONHandlerContentType(t *testing.T) {
	s, _ := newTestService(t, twoRules, nil)
	srv := httptest.NewServer(s.JSONHandler())
	defer srv.Close()
	const body = `{"domain":"d","descriptors":[{"entries":[{"key":"a","value":"ct"}]}]}`
	accepted := 0
	for _, tc := range []struct {
		contentType string
		code        int
	}{
		{"", http.StatusUnsupportedMediaType},
		{"text/plain", http.StatusUnsupportedMediaType},
		{"text/plain; charset=utf-8", http.StatusUnsupportedMediaType},
		{"application/x-www-form-urlencoded", http.StatusUnsupportedMediaType},
		{"multipart/form-data; boundary=x", http.StatusUnsupportedMediaType},
		{"application/jsonp", http.StatusUnsupportedMediaType},
		{"application/json; charset", http.StatusUnsupportedMediaType}, // malformed parameters
		{"application/json", http.StatusOK},
		{"text/plain", http.StatusUnsupportedMediaType},
		{"application/json; charset=utf-8", http.StatusOK},
		{"Application/JSON", http.StatusOK}, // media types are case-insensitive
	} {
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if tc.contentType != "" {
			req.Header.Set("Content-Type", tc.contentType)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Fatalf("Content-Type %q: %d %q, want %d", tc.contentType, resp.StatusCode, b, tc.code)
		}
		switch tc.code {
		case http.StatusUnsupportedMediaType:
			if !strings.Contains(string(b), "Content-Type application/json") {
				t.Errorf("Content-Type %q: 415 body %q does not name the wanted type", tc.contentType, b)
			}
		case http.StatusOK:
			accepted++
			var out pb.RateLimitResponse
			if err := protojson.Unmarshal(b, &out); err != nil {
				t.Fatalf("Content-Type %q: %q: %v", tc.contentType, b, err)
			}
			if got, want := out.GetStatuses()[0].GetLimitRemaining(), uint32(5-accepted); got != want {
				t.Errorf("Content-Type %q: limit_remaining %d, want %d: a refused request consumed quota", tc.contentType, got, want)
			}
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

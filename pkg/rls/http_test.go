package rls

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
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

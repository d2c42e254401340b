package console

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/topk"
)

var t0 = time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)

func TestRates(t *testing.T) {
	k := topk.Key{Domain: "d", Rule: "r", Limit: "l"}
	var counts []Count
	r := NewRates(func() []Count { return counts }, func() time.Time { return t0 })
	steps := []struct {
		counts         []Count
		ok, over, notA uint32
	}{
		// The series appears after the sampler started: it counted up
		// from 0 (a counter is made at its first decision).
		{counts: []Count{{k, "ok", 5}, {k, "over_limit", 2}}, ok: 5, over: 2},
		{counts: []Count{{k, "ok", 12}, {k, "over_limit", 2}, {k, "not_applied", 1}}, ok: 7, notA: 1},
		{counts: []Count{{k, "ok", 12}, {k, "over_limit", 2}, {k, "not_applied", 1}}},
	}
	r.Sample() // before any decision: no series
	if v := r.View(); len(v.Limits) != 0 {
		t.Fatalf("limits before any decision: %+v", v.Limits)
	}
	for i, st := range steps {
		counts = st.counts
		r.Sample()
		v := r.View()
		if len(v.Limits) != 1 {
			t.Fatalf("step %d: %d limits, want 1", i, len(v.Limits))
		}
		l := v.Limits[0]
		if len(l.OK) != RatesSeconds {
			t.Fatalf("step %d: %d seconds, want %d", i, len(l.OK), RatesSeconds)
		}
		last := RatesSeconds - 1
		if l.OK[last] != st.ok || l.OverLimit[last] != st.over || l.NotApplied[last] != st.notA {
			t.Errorf("step %d: newest second ok %d over %d not_applied %d, want %d %d %d", i,
				l.OK[last], l.OverLimit[last], l.NotApplied[last], st.ok, st.over, st.notA)
		}
	}
	// The ring keeps RatesSeconds seconds, oldest first.
	for range RatesSeconds - 2 {
		r.Sample()
	}
	if got := r.View().Limits[0].OK; got[0] != 7 || got[1] != 0 {
		t.Errorf("after %d samples the oldest seconds are %v, want 7 then 0", RatesSeconds, got[:2])
	}
}

// TestRatesSumSeries: counters of one limit and code that differ in a
// label the console drops (a reload changed the limit's algorithm or
// shadow mode) add up, whatever order they are read in.
func TestRatesSumSeries(t *testing.T) {
	k := topk.Key{Domain: "d", Rule: "r", Limit: "l"}
	var counts []Count
	r := NewRates(func() []Count { return counts }, func() time.Time { return t0 })
	for i, st := range []struct {
		counts []Count
		ok     uint32
	}{
		{counts: []Count{{k, "ok", 1000}}, ok: 1000},
		{counts: []Count{{k, "ok", 1000}, {k, "ok", 5}}, ok: 5},
		{counts: []Count{{k, "ok", 9}, {k, "ok", 1000}}, ok: 4},
		{counts: []Count{{k, "ok", 1000}, {k, "ok", 12}}, ok: 3},
	} {
		counts = st.counts
		r.Sample()
		if got := r.View().Limits[0].OK[RatesSeconds-1]; got != st.ok {
			t.Errorf("step %d: newest second ok %d, want %d", i, got, st.ok)
		}
	}
}

func newTestHandler(t *testing.T) (http.Handler, *topk.Set) {
	t.Helper()
	top, err := topk.New(topk.Options{})
	if err != nil {
		t.Fatal(err)
	}
	admin := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Admin-Path", r.URL.Path)
		_, _ = io.WriteString(w, "admin "+r.Method)
	})
	return Handler(Options{Replica: "pod-1", Top: top, Admin: admin, Now: func() time.Time { return t0 }}), top
}

func TestPageHeaders(t *testing.T) {
	h, _ := newTestHandler(t)
	for _, path := range []string{"/console/", "/console/app.js", "/console/app.css"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: HTTP %d", path, rec.Code)
		}
		if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Errorf("%s: Content-Security-Policy %q", path, csp)
		}
		if rec.Header().Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: X-Frame-Options %q", path, rec.Header().Get("X-Frame-Options"))
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/console/", nil))
	body := rec.Body.String()
	if strings.Contains(body, "<script>") || !strings.Contains(body, `<script src="app.js"`) {
		t.Error("the page has inline script, or not its script file")
	}
	if !strings.Contains(body, "pod-1") || !strings.Contains(body, "own traffic") {
		t.Error("the page does not name the replica and say it shows its own traffic")
	}
}

func TestReplicaEscaped(t *testing.T) {
	h := Handler(Options{Replica: `<script>x</script>`})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/console/", nil))
	if strings.Contains(rec.Body.String(), "<script>x") {
		t.Error("the replica name went into the page unescaped")
	}
}

// TestCSRF: writes reach the admin API only with the page's token in
// both the cookie and the header, from the same origin.
func TestCSRF(t *testing.T) {
	h, _ := newTestHandler(t)
	page := httptest.NewRecorder()
	h.ServeHTTP(page, httptest.NewRequest(http.MethodGet, "/console/", nil))
	cookie := page.Result().Cookies()[0]
	if cookie.Name != csrfCookie || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("CSRF cookie %+v", cookie)
	}
	if !strings.Contains(page.Body.String(), cookie.Value) {
		t.Fatal("the page does not carry the CSRF token")
	}
	tests := []struct {
		name   string
		cookie string
		header string
		extra  map[string]string
		want   int
	}{
		{name: "page token", cookie: cookie.Value, header: cookie.Value, want: http.StatusOK},
		{name: "same origin", cookie: cookie.Value, header: cookie.Value, extra: map[string]string{"Origin": "http://example.com", "Sec-Fetch-Site": "same-origin"}, want: http.StatusOK},
		{name: "no header", cookie: cookie.Value, want: http.StatusForbidden},
		{name: "no cookie", header: cookie.Value, want: http.StatusForbidden},
		{name: "wrong header", cookie: cookie.Value, header: "x" + cookie.Value, want: http.StatusForbidden},
		{name: "other origin", cookie: cookie.Value, header: cookie.Value, extra: map[string]string{"Origin": "http://evil.example"}, want: http.StatusForbidden},
		{name: "cross site", cookie: cookie.Value, header: cookie.Value, extra: map[string]string{"Sec-Fetch-Site": "cross-site"}, want: http.StatusForbidden},
	}
	for _, tc := range tests {
		for _, method := range []string{http.MethodPost, http.MethodDelete} {
			req := httptest.NewRequest(method, "/console/api/overrides?domain=d", strings.NewReader("{}"))
			if tc.cookie != "" {
				req.AddCookie(&http.Cookie{Name: csrfCookie, Value: tc.cookie})
			}
			if tc.header != "" {
				req.Header.Set(csrfHeader, tc.header)
			}
			for k, v := range tc.extra {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Errorf("%s %s: HTTP %d, want %d", tc.name, method, rec.Code, tc.want)
			}
			if rec.Code == http.StatusOK && (rec.Header().Get("X-Admin-Path") != "/admin/overrides" || rec.Body.String() != "admin "+method) {
				t.Errorf("%s %s: not forwarded to the admin API's /admin/overrides: %q", tc.name, method, rec.Body.String())
			}
		}
	}
}

func TestTopJSONAndText(t *testing.T) {
	h, top := newTestHandler(t)
	for range 3 {
		top.Record(t0, "d", "r", "l", []algo.Entry{{Key: "ip", Value: "10.0.0.1\x1b[2J"}}, true)
	}
	tests := []struct {
		query string
		code  int
	}{
		{"", http.StatusOK}, {"?window=10m&n=5", http.StatusOK},
		{"?window=soon", http.StatusBadRequest}, {"?window=11m", http.StatusBadRequest}, {"?n=0", http.StatusBadRequest},
	}
	for _, tc := range tests {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, TopPath+tc.query, nil))
		if rec.Code != tc.code {
			t.Errorf("%s: HTTP %d, want %d: %s", tc.query, rec.Code, tc.code, rec.Body)
		}
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	p, err := TopClient{Base: srv.URL}.Fetch(context.Background(), "1m", 10)
	if err != nil {
		t.Fatal(err)
	}
	if p.Replica != "pod-1" || len(p.Limits) != 1 || p.Limits[0].Denied != 3 || p.Limits[0].TopDenied[0].Count != 3 {
		b, _ := json.Marshal(p)
		t.Fatalf("top page %s", b)
	}
	if _, err := (TopClient{Base: srv.URL}).Fetch(context.Background(), "2h", 10); err == nil || !strings.Contains(err.Error(), "window") {
		t.Errorf("a bad window: %v, want the server's error", err)
	}
	var out bytes.Buffer
	if err := WriteTop(&out, p); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "\x1b") || !strings.Contains(out.String(), `"ip=10.0.0.1\x1b[2J"`) {
		t.Errorf("the terminal output does not quote control characters:\n%s", out.String())
	}
}

package admin

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(b)
}

// TestEndpointsByListener: the service handler serves what the cluster
// needs and none of the debug endpoints; the debug handler serves those
// and nothing of the service's.
func TestEndpointsByListener(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "handled") })
	svc := New(Options{Ready: func(context.Context) error { return nil }, Metrics: ok, JSON: ok})
	cfg := func() any { return map[string]string{"domain": "shop"} }
	tests := []struct {
		name string
		h    http.Handler
		path string
		code int
	}{
		{"service /healthz", svc, "/healthz", http.StatusOK},
		{"service /readyz", svc, "/readyz", http.StatusOK},
		{"service /healthcheck", svc, "/healthcheck", http.StatusOK},
		{"service /metrics", svc, "/metrics", http.StatusOK},
		{"service /json", svc, "/json", http.StatusOK},
		{"service hides /debug/config", svc, "/debug/config", http.StatusNotFound},
		{"service hides /debug/pprof/", svc, "/debug/pprof/", http.StatusNotFound},
		{"debug /debug/config", NewDebug(DebugOptions{Config: cfg}), "/debug/config", http.StatusOK},
		{"debug without pprof", NewDebug(DebugOptions{Config: cfg}), "/debug/pprof/", http.StatusNotFound},
		{"debug with pprof", NewDebug(DebugOptions{Config: cfg, Pprof: true}), "/debug/pprof/", http.StatusOK},
		{"debug hides /metrics", NewDebug(DebugOptions{Config: cfg, Pprof: true}), "/metrics", http.StatusNotFound},
		{"debug hides /json", NewDebug(DebugOptions{Config: cfg, Pprof: true}), "/json", http.StatusNotFound},
		{"service hides /debug/explain", svc, "/debug/explain", http.StatusNotFound},
		{"debug /debug/explain takes a POST", NewDebug(DebugOptions{Explain: ok}), "/debug/explain", http.StatusMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if code, body := get(t, tt.h, tt.path); code != tt.code {
				t.Errorf("GET %s: %d %q, want %d", tt.path, code, body, tt.code)
			}
		})
	}
	if _, body := get(t, NewDebug(DebugOptions{Config: cfg}), "/debug/config"); !strings.Contains(body, `"domain": "shop"`) {
		t.Errorf("/debug/config = %q, want the config as JSON", body)
	}
	rec := httptest.NewRecorder()
	NewDebug(DebugOptions{Explain: ok}).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/debug/explain", strings.NewReader("{}")))
	if rec.Code != http.StatusOK || rec.Body.String() != "handled" {
		t.Errorf("POST /debug/explain: %d %q, want the Explain handler's answer", rec.Code, rec.Body.String())
	}
}

// TestReadinessEndpointsAgree: /readyz and /healthcheck give the same
// answer, from the one Ready function, with its reason.
func TestReadinessEndpointsAgree(t *testing.T) {
	var reason error
	svc := New(Options{Ready: func(context.Context) error { return reason }})
	for _, r := range []error{nil, errors.New("backend: down"), nil} {
		reason = r
		wantCode, wantBody := http.StatusOK, "ready"
		if r != nil {
			wantCode, wantBody = http.StatusServiceUnavailable, "not ready: "+r.Error()
		}
		for _, path := range []string{"/readyz", "/healthcheck"} {
			if code, body := get(t, svc, path); code != wantCode || strings.TrimSpace(body) != wantBody {
				t.Errorf("GET %s with reason %v: %d %q, want %d %q", path, r, code, body, wantCode, wantBody)
			}
		}
	}
}

// TestRLConfig: /rlconfig is on the debug handler only, shows what its
// writer writes, and turns a failing writer into a 500, not a partial 200.
func TestRLConfig(t *testing.T) {
	var fail error
	write := func(w io.Writer) error {
		_, _ = io.WriteString(w, "shop.user: unit=MINUTE requests_per_unit=20, shadow_mode: false\n")
		return fail
	}
	debug := NewDebug(DebugOptions{RLConfig: write})
	code, body := get(t, debug, "/rlconfig")
	if code != http.StatusOK || body != "shop.user: unit=MINUTE requests_per_unit=20, shadow_mode: false\n" {
		t.Errorf("GET /rlconfig: %d %q, want 200 and the writer's text", code, body)
	}
	fail = errors.New("disk on fire")
	if code, body := get(t, debug, "/rlconfig"); code != http.StatusInternalServerError || strings.Contains(body, "shop.user") {
		t.Errorf("GET /rlconfig with a failing writer: %d %q, want 500 without the partial text", code, body)
	}
	if code, _ := get(t, New(Options{}), "/rlconfig"); code != http.StatusNotFound {
		t.Errorf("service handler GET /rlconfig: %d, want 404", code)
	}
}

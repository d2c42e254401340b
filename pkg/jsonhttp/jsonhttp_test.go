package jsonhttp

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestWrite(t *testing.T) {
	rec := httptest.NewRecorder()
	rec.Header().Set("Cache-Control", "no-store")
	Write(rec, http.StatusTeapot, map[string]int{"n": 1})
	if rec.Code != http.StatusTeapot {
		t.Errorf("status %d, want %d", rec.Code, http.StatusTeapot)
	}
	if got := rec.Header().Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type %q", got)
	}
	if got := rec.Header().Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control %q, want the caller's no-store kept", got)
	}
	if got := rec.Body.String(); got != "{\"n\":1}\n" {
		t.Errorf("body %q", got)
	}
}

func TestError(t *testing.T) {
	rec := httptest.NewRecorder()
	Error(rec, http.StatusBadRequest, errors.New("bad \"x\""))
	if got := rec.Body.String(); got != "{\"error\":\"bad \\\"x\\\"\"}\n" || rec.Code != http.StatusBadRequest {
		t.Errorf("%d %q", rec.Code, got)
	}
}

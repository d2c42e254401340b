package admin

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRequireToken: only the file's token passes; no file configured
// turns the API off; an empty file lets nobody in.
func TestRequireToken(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "token")
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(good, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		file     string
		auth     string
		wantCode int
		wantBody string
	}{
		{"right token", good, "Bearer s3cret", http.StatusOK, "inner"},
		{"no header", good, "", http.StatusUnauthorized, "bearer token"},
		{"wrong token", good, "Bearer s3cre", http.StatusUnauthorized, "bearer token"},
		{"not bearer", good, "Basic s3cret", http.StatusUnauthorized, "bearer token"},
		{"api off", "", "Bearer s3cret", http.StatusForbidden, "--admin-token-file"},
		{"empty file", empty, "Bearer ", http.StatusInternalServerError, "is empty"},
		{"missing file", filepath.Join(dir, "nope"), "Bearer x", http.StatusInternalServerError, "--admin-token-file"},
	}
	inner := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("inner")) })
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := NewDebug(DebugOptions{Admin: inner, AdminTokenFile: tc.file})
			req := httptest.NewRequest(http.MethodGet, "/admin/overrides", nil)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.wantCode || !strings.Contains(rec.Body.String(), tc.wantBody) {
				t.Errorf("got %d %q, want %d containing %q", rec.Code, rec.Body.String(), tc.wantCode, tc.wantBody)
			}
		})
	}
}

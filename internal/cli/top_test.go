package cli

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestTopCLI: the top command prints the server's lists, and names what
// went wrong otherwise.
func TestTopCLI(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/top" || r.URL.Query().Get("window") != "10m" || r.URL.Query().Get("n") != "3" {
			http.Error(w, `{"error":"unexpected `+r.URL.String()+`"}`, http.StatusBadRequest)
			return
		}
		_, _ = w.Write([]byte(`{"replica":"pod-1","window":"10m0s","covers":"11m0s","k":32,"limits":[{"domain":"d","rule":"r","limit":"l","seen":9,"denied":4,
			"top_denied":[{"value":"user=bob","count":4,"lower":4}],"top_seen":[{"value":"user=bob","count":9,"lower":9}]}]}`))
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	tests := []struct {
		name string
		args []string
		env  map[string]string
		code int
		want string
	}{
		{"prints", []string{"--addr", addr, "--window", "10m", "--n", "3"}, nil, 0, `denied  "user=bob"  4`},
		{"flags from their twins", nil, map[string]string{"ENVOY_RLS_ADDR": addr, "ENVOY_RLS_WINDOW": "10m", "ENVOY_RLS_N": "3"}, 0, `denied  "user=bob"  4`},
		{"bad twin", []string{"--addr", addr}, map[string]string{"ENVOY_RLS_N": "many"}, 2, "ENVOY_RLS_N"},
		{"server refuses", []string{"--addr", addr, "--window", "2h"}, nil, 1, "unexpected"},
		// Wrong flags are a wrong command line, found before the server is
		// asked (it would answer the first three with 400, exit 1).
		{"n zero", []string{"--addr", addr, "--n", "0"}, nil, 2, "--n: 0 (want 1 to 1000)"},
		{"window not a duration", []string{"--addr", addr, "--window", "soon"}, nil, 2, `--window: "soon"`},
		{"negative window", []string{"--addr", addr, "--window", "-1m"}, nil, 2, `--window: "-1m"`},
		{"negative watch", []string{"--addr", addr, "--watch", "-1s"}, nil, 2, "--watch: -1s"},
		{"unknown flag", []string{"--bogus"}, nil, 2, "bogus"},
		{"argument", []string{"extra"}, nil, 2, "extra"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var out, errOut bytes.Buffer
			if code := run(append([]string{"top"}, tt.args...), &out, &errOut); code != tt.code {
				t.Fatalf("exit %d, want %d; stdout %s stderr %s", code, tt.code, &out, &errOut)
			}
			if !strings.Contains(out.String()+errOut.String(), tt.want) {
				t.Errorf("output does not contain %q:\n%s%s", tt.want, &out, &errOut)
			}
		})
	}
}

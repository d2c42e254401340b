package envoytest

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// direct is a bootstrap whose one listener answers every request itself.
const direct = IngressHead + `            - name: all
              domains: ["*"]
              routes:
              - match: {prefix: /}
                direct_response: {status: 200, body: {inline_string: hello}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
`

func TestValidate(t *testing.T) {
	tests := []struct {
		name      string
		bootstrap string
		wantErr   string
	}{
		{"accepted", direct, ""},
		{"unknown field", strings.Replace(direct, "stat_prefix: ingress", "stat_prefix: ingress\n          no_such_field: 1", 1), "no_such_field"},
		{"route to a missing cluster", strings.Replace(direct, "direct_response: {status: 200, body: {inline_string: hello}}", "route: {cluster: nowhere}", 1), "nowhere"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(t, tc.name, []byte(tc.bootstrap))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("Validate accepted a bootstrap Envoy must refuse (%s)", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("Validate error does not name %q: %v", tc.wantErr, err)
			}
		})
	}
}

func TestStartServes(t *testing.T) {
	e := Start(t, []byte(direct), Options{Name: "direct"})
	addr, err := e.ListenerAddr("ingress")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "hello" {
		t.Fatalf("got %d %q, want 200 hello", resp.StatusCode, body)
	}
	stats, err := e.Stats("http.ingress.downstream_rq_2xx")
	if err != nil {
		t.Fatal(err)
	}
	if stats["http.ingress.downstream_rq_2xx"] != 1 {
		t.Fatalf("downstream_rq_2xx = %v, want 1", stats)
	}
}

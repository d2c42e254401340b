package override

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// TestHTTP: the client and the handler agree on set, list and clear, and
// bad requests get a 400 naming the problem.
func TestHTTP(t *testing.T) {
	tb, _ := newTable(t, &MemStore{}, time.Now)
	srv := httptest.NewServer(Handler(tb, func() *rules.Snapshot { return testRule(t) }))
	t.Cleanup(srv.Close)
	c := &Client{Base: srv.URL}
	ctx := context.Background()
	half := 0.5
	o, err := c.Set(ctx, SetRequest{Domain: "d", Limit: "per_user", Factor: &half, TTL: "15m", Reason: "incident", By: "me"})
	if err != nil || o.Source != Manual || o.Factor != 0.5 || o.Expires.Sub(o.SetAt) != 15*time.Minute {
		t.Fatalf("Set = %+v, %v", o, err)
	}
	list, err := c.List(ctx)
	if err != nil || len(list) != 1 || list[0].Reason != "incident" || list[0].By != "me" {
		t.Fatalf("List = %+v, %v", list, err)
	}
	var table bytes.Buffer
	if err := WriteTable(&table, list); err != nil || !strings.Contains(table.String(), "factor=0.5") {
		t.Errorf("WriteTable = %q, %v", table.String(), err)
	}
	if _, err := c.Clear(ctx, Filter{Domain: "d"}, "me", ""); err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "reason") {
		t.Errorf("Clear without reason: %v, want a 400 naming the reason", err)
	}
	gone, err := c.Clear(ctx, Filter{Domain: "d"}, "me", "over")
	if err != nil || len(gone) != 1 {
		t.Fatalf("Clear = %+v, %v", gone, err)
	}

	bad := []struct {
		name, method, path, body, want string
	}{
		{"unknown domain", http.MethodPost, Path, `{"domain":"x","limit":"per_user","factor":0.5,"ttl":"1m","reason":"r"}`, `no domain "x"`},
		{"unknown limit", http.MethodPost, Path, `{"domain":"d","limit":"per_usr","factor":0.5,"ttl":"1m","reason":"r"}`, `no limit "per_usr" (want one of: per_user, d.ip, d.path/rate_limits[0], d.path/rate_limits[1])`},
		{"both", http.MethodPost, Path, `{"domain":"d","limit":"per_user","factor":0.5,"requests_per_unit":3,"ttl":"1m","reason":"r"}`, "exactly one"},
		{"zero factor", http.MethodPost, Path, `{"domain":"d","limit":"per_user","factor":0,"ttl":"1m","reason":"r"}`, "factor"},
		{"bad ttl", http.MethodPost, Path, `{"domain":"d","limit":"per_user","factor":0.5,"ttl":"soon","reason":"r"}`, "ttl"},
		{"unknown field", http.MethodPost, Path, `{"domain":"d","limit":"per_user","factr":0.5,"ttl":"1m","reason":"r"}`, "unknown field"},
		{"clear nothing named", http.MethodDelete, Path + "?reason=r", "", "all=true"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var b bytes.Buffer
			_, _ = b.ReadFrom(resp.Body)
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(b.String(), tc.want) {
				t.Errorf("got %d %q, want 400 naming %q", resp.StatusCode, b.String(), tc.want)
			}
		})
	}
}

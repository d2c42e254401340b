package e2e

import (
	"fmt"
	"testing"
)

// TestMemstoreMaxKeys sends more distinct clients than --memstore-max-keys
// to the in-process store, as the backend and as the local failure mode's
// store (Redis unreachable), and reads the bound in the metrics: never more
// keys than the flag allows, and every key beyond it counted as an eviction.
// metricsRules' per-user limit lasts an hour, so nothing expires meanwhile:
// keys held + evictions = clients sent.
func TestMemstoreMaxKeys(t *testing.T) {
	t.Parallel()
	const maxKeys, clients = 64, 300
	tests := []struct {
		name string
		args []string
	}{
		{"memory backend", nil},
		// Port 1 refuses connections; the breaker then sends every request
		// to the local store without trying Redis.
		{"local failure mode", []string{"--redis-url", "redis://127.0.0.1:1", "--redis-failure-mode", "local", "--redis-breaker-failures=1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, serveOpts{
				ConfigDir: rulesDir(t, map[string]string{"metered.yaml": metricsRules}),
				Args:      append([]string{fmt.Sprintf("--memstore-max-keys=%d", maxKeys)}, tt.args...),
			})
			for i := range clients {
				if code := s.ask("metered", desc("user", fmt.Sprint("client-", i))).GetOverallCode().String(); code != "OK" {
					t.Fatalf("client %d: %s, want OK (its first request)", i, code)
				}
			}
			m := s.scrape()
			keys, evictions := m.get("envoy_rls_memstore_keys", nil), m.get("envoy_rls_memstore_evictions_total", nil)
			if keys > maxKeys || keys < 1 {
				t.Errorf("envoy_rls_memstore_keys = %v, want 1..%d", keys, maxKeys)
			}
			if keys+evictions != clients {
				t.Errorf("%v keys + %v evictions = %v, want the %d clients sent", keys, evictions, keys+evictions, clients)
			}
			s.stop()
		})
	}
}

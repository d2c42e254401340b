package serveconfig

import "testing"

func TestConsoleFlags(t *testing.T) {
	c := parseServe(t, "--console-replica=pod-7", "--console-hash-values").console.config()
	if c.Off || c.Replica != "pod-7" || !c.HashValues {
		t.Errorf("config %+v", c)
	}
	if c := parseServe(t, "--console=false").console.config(); !c.Off || c.Replica == "" {
		t.Errorf("--console=false: %+v, want off and a replica name from the host", c)
	}
}

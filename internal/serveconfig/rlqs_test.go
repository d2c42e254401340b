package serveconfig

import (
	"slices"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
)

func TestRLQSFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // substring of the error; "" for valid
	}{
		{name: "defaults"},
		{name: "deny both", args: []string{"--rlqs-unknown=deny", "--rlqs-failure-mode=deny"}},
		{name: "bad unknown", args: []string{"--rlqs-unknown=maybe"}, want: `--rlqs-unknown: rlqs: "maybe" is neither allow nor deny`},
		{name: "bad failure mode", args: []string{"--rlqs-failure-mode=open"}, want: `--rlqs-failure-mode: rlqs: "open" is neither allow nor deny`},
		{name: "sub-second interval", args: []string{"--rlqs-report-interval=500ms"}, want: "--rlqs-report-interval: 500ms must be whole seconds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseServe(t, tt.args...).rlqs.config()
			expectValidation(t, err, tt.want)
		})
	}
	c, err := parseServe(t, "--rlqs-key-order= name, client ,,", "--rlqs-unknown=deny").rlqs.config()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.KeyOrder, []string{"name", "client"}) || c.Unknown != rlqs.DenyAll || c.FailureMode != rlqs.AllowAll {
		t.Errorf("config %+v, want key order [name client], unknown deny, failure allow", c)
	}
}

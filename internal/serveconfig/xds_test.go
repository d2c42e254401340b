package serveconfig

import (
	"maps"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

func TestParsePairs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[string]string
		err  string
	}{
		{"", nil, ""},
		{"zone:a, team=b", map[string]string{"zone": "a", "team": "b"}, ""},
		{"authorization:Bearer x:y", map[string]string{"authorization": "Bearer x:y"}, ""},
		{"novalue", nil, `"novalue" is not key:value`},
		{":v", nil, `":v" is not key:value`},
	} {
		got, err := parsePairs(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parsePairs(%q) error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !maps.Equal(got, tc.want) {
			t.Errorf("parsePairs(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// TestXDSFlagErrors: each bad xDS setting is refused naming its flag.
func TestXDSFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--config-source=git"}, "--config-source"},
		{[]string{"--config-source=xds", "--xds-node-metadata=zone"}, "--xds-node-metadata"},
		{[]string{"--config-source=xds", "--xds-headers=x"}, "--xds-headers"},
		{[]string{"--config-source=xds", "--xds-tls-san=cp"}, "--xds-tls-san"},
		{[]string{"--config-source=xds", "--xds-tls-cert=/c"}, "--xds-tls-cert and --xds-tls-key"},
		{[]string{"--config-source=xds", "--xds-tls-ca=/nonexistent.pem"}, "--xds-tls-ca"},
		{[]string{"--config-source=xds", "--xds-max-msg-size=0"}, "--xds-max-msg-size"},
		{[]string{"--config-source=xds", "--xds-backoff-initial=2s", "--xds-backoff-max=1s"}, "--xds-backoff-*"},
		{[]string{"--config-source=xds", "--xds-backoff-random-factor=1"}, "--xds-backoff-*"},
		{[]string{"--config-source=xds", "--xds-node-id="}, "--xds-*: xdsrules: no node id"},
		{[]string{"--config-source=xds", "--xds-extensions-file=/nonexistent.yaml"}, "--xds-extensions-file"},
	} {
		cfg, fs := New("serve")
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		err := cfg.xds.validate()
		if err == nil {
			_, err = cfg.xds.config(rules.Options{})
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.want)
		}
	}
}

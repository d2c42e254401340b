package serveconfig

import "testing"

func TestOverrideFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // substring of the error; "" for valid
	}{
		{name: "defaults"},
		{name: "adaptive with prometheus", args: []string{"--adaptive-config=a.yaml", "--prometheus-url=http://p:9090"}},
		{name: "adaptive without prometheus", args: []string{"--adaptive-config=a.yaml"}, want: "--adaptive-config: needs --prometheus-url"},
		{name: "zero refresh", args: []string{"--override-refresh=0s"}, want: "--override-refresh: 0s must be positive"},
		{name: "negative max ttl", args: []string{"--override-max-ttl=-1h"}, want: "--override-max-ttl: -1h0m0s must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expectValidation(t, parseServe(t, tt.args...).override.validate(), tt.want)
		})
	}
	_, err := parseServe(t, "--admin-tls-client-ca=ca.pem").override.debugTLS()
	expectValidation(t, err, "--admin-tls-client-ca needs --admin-tls-cert and --admin-tls-key")
}

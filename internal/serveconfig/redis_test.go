package serveconfig

import (
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/failover"
)

func TestRedisFlagsValidate(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // substring of the error; "" for valid
		mode failover.Mode
	}{
		{name: "defaults", mode: failover.ModeError},
		{name: "local", args: []string{"--redis-failure-mode=local", "--expected-replicas=3"}, mode: failover.ModeLocal},
		{name: "ratio", args: []string{"--redis-breaker-failure-ratio=0.5"}, mode: failover.ModeError},
		{name: "unknown mode", args: []string{"--redis-failure-mode=open"}, want: "--redis-failure-mode"},
		{name: "zero replicas", args: []string{"--expected-replicas=0"}, want: "--expected-replicas"},
		{name: "zero timeout", args: []string{"--redis-timeout=0s"}, want: "--redis-timeout"},
		{name: "negative pool", args: []string{"--redis-pool-size=-1"}, want: "--redis-pool-size"},
		{name: "zero failures", args: []string{"--redis-breaker-failures=0"}, want: "--redis-breaker-failures"},
		{name: "ratio above 1", args: []string{"--redis-breaker-failure-ratio=1.5"}, want: "--redis-breaker-failure-ratio"},
		{name: "ratio NaN", args: []string{"--redis-breaker-failure-ratio=NaN"}, want: "--redis-breaker-failure-ratio"},
		{name: "zero cooldown", args: []string{"--redis-breaker-cooldown=0s"}, want: "--redis-breaker-cooldown"},
		{name: "zero probes", args: []string{"--redis-breaker-probes=0"}, want: "--redis-breaker-probes"},
		{name: "leasing off", args: []string{"--lease-ttl=0s"}, mode: failover.ModeError},
		{name: "negative lease ttl", args: []string{"--lease-ttl=-1s"}, want: "--lease-ttl"},
		{name: "linger above the cap", args: []string{"--redis-batch-linger=1ms"}, want: "--redis-batch-linger"},
		{name: "negative linger", args: []string{"--redis-batch-linger=-1us"}, want: "--redis-batch-linger"},
		{name: "linger", args: []string{"--redis-batch-linger=200us"}, mode: failover.ModeError},
		{name: "no counter hashes", args: []string{"--redis-counter-hashes=0"}, want: "--redis-counter-hashes: 0 must be between 1 and 46656"},
		{name: "too many counter hashes", args: []string{"--redis-counter-hashes=46657"}, want: "--redis-counter-hashes"},
		{name: "counter hashes", args: []string{"--redis-counter-hashes=1024"}, mode: failover.ModeError},
		{name: "zero hot rps", args: []string{"--lease-hot-rps=0"}, want: "--lease-hot-rps"},
		{name: "fraction zero", args: []string{"--lease-max-fraction=0"}, want: "--lease-max-fraction"},
		{name: "fraction above 1", args: []string{"--lease-max-fraction=1.5"}, want: "--lease-max-fraction"},
		{name: "fraction NaN", args: []string{"--lease-max-fraction=NaN"}, want: "--lease-max-fraction"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mode, err := parseServe(t, tt.args...).redis.validate()
			expectValidation(t, err, tt.want)
			if tt.want == "" && mode != tt.mode {
				t.Fatalf("mode %v, want %v", mode, tt.mode)
			}
		})
	}
}

// TestLeaseFlags: the lease flags (and their environment twins) reach the
// stack's lease options.
func TestLeaseFlags(t *testing.T) {
	t.Setenv("ENVOY_RLS_LEASE_HOT_RPS", "250")
	cfg := parseServe(t, "--lease-ttl=150ms", "--lease-max-fraction=0.25")
	if _, err := cfg.redis.validate(); err != nil {
		t.Fatal(err)
	}
	got := cfg.redis.stackConfig(failover.ModeError).Lease
	if got.TTL != 150*time.Millisecond || got.HotRPS != 250 || got.MaxFraction != 0.25 {
		t.Fatalf("lease options %+v, want ttl 150ms, hot rps 250, max fraction 0.25", got)
	}
}

func TestRedisFlagsFromEnv(t *testing.T) {
	t.Setenv("ENVOY_RLS_REDIS_BREAKER_COOLDOWN", "3s")
	t.Setenv("ENVOY_RLS_REDIS_FAILURE_MODE", "deny")
	cfg := parseServe(t)
	mode, err := cfg.redis.validate()
	if err != nil || mode != failover.ModeDeny || cfg.redis.breaker.cooldown.String() != "3s" {
		t.Fatalf("from env: mode %v, cooldown %v, %v", mode, cfg.redis.breaker.cooldown, err)
	}
}

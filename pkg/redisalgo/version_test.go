package redisalgo

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestVersionError(t *testing.T) {
	for _, tc := range []struct {
		info    string
		tooOld  bool
		comment string
	}{
		{"# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n", false, "Debian 12's"},
		{"# Server\r\nredis_version:8.2.1\r\n", false, "newer"},
		{"# Server\r\nredis_version:6.2.14\r\n", true, "no PEXPIRE … NX"},
		{"# Server\r\nredis_version:5.0.7\r\n", true, "older"},
		{"# Server\r\nredis_mode:standalone\r\n", false, "no version: the commands say for themselves"},
		{"redis_version:x.y\r\n", false, "unreadable version"},
	} {
		err := versionError(tc.info)
		if got := errors.Is(err, ErrRedisTooOld); got != tc.tooOld {
			t.Errorf("%s: versionError(%q) = %v, want too old %v", tc.comment, tc.info, err, tc.tooOld)
		}
	}
}

// TestPingChecksVersion: the installed redis-server (7.0 or later) passes
// the version check, on standalone Redis and on every master of a cluster.
func TestPingChecksVersion(t *testing.T) {
	standaloneAndCluster(t, func(t *testing.T, client redis.UniversalClient) {
		b := newBackend(t, client, Options{})
		if err := b.Ping(context.Background()); err != nil {
			t.Fatalf("Ping: %v", err)
		}
		if !b.versionChecked.Load() {
			t.Fatal("Ping passed without checking the version")
		}
	})
}

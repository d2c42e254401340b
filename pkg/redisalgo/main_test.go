package redisalgo

import (
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
)

// TestMain lets every test file of the package share one standalone server,
// one cluster and one Sentinel set (redistest.Shared*), started on first use
// and stopped after the last test.
func TestMain(m *testing.M) { redistest.Main(m) }

package rls

import "github.com/envoy-rls/envoy-rls/pkg/algo"

// Backend is what the service decides with: the backend layer contract,
// algo.Applier, whose comment states it. The service takes now once as the
// request arrives.
type Backend = algo.Applier

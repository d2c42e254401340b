package clients

import (
	"context"
	"fmt"

	flag "github.com/spf13/pflag"

	"github.com/envoy-rls/envoy-rls/internal/flagenv"
	"github.com/envoy-rls/envoy-rls/internal/serveconfig"
	"github.com/envoy-rls/envoy-rls/pkg/redisalgo"
	"github.com/envoy-rls/envoy-rls/pkg/redisclient"
)

// deploymentCounterHashes returns the counter-hash count a tool (inspect,
// explain) reads the deployment's keys with: the one its replicas
// recorded in Redis (redisalgo.ResolveCounterHashes), else
// --redis-counter-hashes. The flag, when given on the command line or in
// the environment, must agree with the recorded count: keys read with
// another would be misread or refused.
func deploymentCounterHashes(ctx context.Context, client *redisclient.Client, keys serveconfig.CounterKeys, fs *flag.FlagSet, env flagenv.Env) (int, error) {
	given := 0
	if flagenv.Given(fs, env.Lookup, "redis-counter-hashes") {
		given = keys.Hashes
	}
	var r redisalgo.MetaReader = client.Single
	if client.Cluster != nil {
		r = client.Cluster
	}
	n, err := redisalgo.ResolveCounterHashes(ctx, r, keys.Prefix, given)
	if err != nil {
		return 0, fmt.Errorf("--redis-counter-hashes: %w", err)
	}
	return n, nil
}

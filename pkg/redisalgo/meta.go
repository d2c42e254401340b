package redisalgo

// The deployment's counter-hash count B (Options.CounterHashes) names
// every fixed window's hash and every hash-tagged key, so replicas (and
// tools reading keys) with different counts count apart: each would let
// through a limit of its own, and token buckets would refill once per
// count. Nothing in a key says which B named it, so the first replica to
// pass readiness records its B in MetaKey (HSETNX: set if absent), and
// every later one compares its own with the recorded one there (Ping): a
// replica with another B is not ready, and says both values and the fix.
// Tools (inspect, explain) read the recorded B instead of needing the
// flag (ResolveCounterHashes). docs/redis.md, "Sizing counter hashes",
// says how to change B on purpose.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// ErrCounterHashesMismatch is wrapped by the error for a counter-hash
// count that differs from the one recorded for the deployment.
var ErrCounterHashesMismatch = errors.New("counter-hash count differs from the deployment's")

// MetaReader reads the deployment's MetaKey: *redis.Client or
// *redis.ClusterClient (which routes the key to its master).
type MetaReader interface {
	HGet(ctx context.Context, key, field string) *redis.StringCmd
}

// checkCounterHashes records the backend's counter-hash count in MetaKey
// when none is recorded, and fails when another one is: one round trip
// (HSETNX, then HGET of what is recorded, in one pipeline).
func (b *Backend) checkCounterHashes(ctx context.Context) error {
	key := MetaKey(b.keyPrefix)
	set := redis.NewBoolCmd(ctx, "hsetnx", key, MetaCounterHashes, b.counterHashes)
	get := redis.NewStringCmd(ctx, "hget", key, MetaCounterHashes)
	pipe := b.client.Pipeline()
	_ = pipe.Process(ctx, set)
	_ = pipe.Process(ctx, get)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("redisalgo: record the counter-hash count in %s: %w", key, err)
	}
	n, err := parseRecorded(key, get.Val())
	if err != nil {
		return err
	}
	if n != b.counterHashes {
		return fmt.Errorf("redisalgo: %w: this replica's is %d, the deployment's is %d (recorded in Redis, %s field %s); replicas with different counts count every fixed-window limit apart. Set --redis-counter-hashes=%d on this replica, or change the count on purpose as docs/redis.md (\"Sizing counter hashes\") says",
			ErrCounterHashesMismatch, b.counterHashes, n, key, MetaCounterHashes, n)
	}
	return nil
}

// parseRecorded parses the count recorded in key.
func parseRecorded(key, v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxCounterHashes {
		return 0, fmt.Errorf("redisalgo: %s field %s holds %q, which is no counter-hash count (1 to %d): delete the field to have the next replica record its own", key, MetaCounterHashes, v, MaxCounterHashes)
	}
	return n, nil
}

// RecordedCounterHashes returns the counter-hash count recorded for the
// deployment of key prefix prefix, or 0 when none is.
func RecordedCounterHashes(ctx context.Context, r MetaReader, prefix string) (int, error) {
	key := MetaKey(prefix)
	v, err := r.HGet(ctx, key, MetaCounterHashes).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("redisalgo: read the deployment's counter-hash count (%s): %w", key, err)
	}
	return parseRecorded(key, v)
}

// ResolveCounterHashes returns the counter-hash count a tool reads the
// deployment's keys with: the recorded one (RecordedCounterHashes); when
// none is recorded, given, or DefaultCounterHashes when given is 0. given
// is the count the tool was told (a flag), 0 when it was told none; when
// it differs from the recorded one the error names both, since keys read
// with it would be misread or refused.
func ResolveCounterHashes(ctx context.Context, r MetaReader, prefix string, given int) (int, error) {
	if err := ValidateCounterHashes(given); err != nil {
		return 0, err
	}
	rec, err := RecordedCounterHashes(ctx, r, prefix)
	switch {
	case err != nil:
		return 0, err
	case rec == 0:
		return cmp.Or(given, DefaultCounterHashes), nil
	case given != 0 && given != rec:
		return 0, fmt.Errorf("redisalgo: %w: given %d, the deployment's is %d (recorded in Redis, %s field %s); give %d or leave the count out to use the recorded one",
			ErrCounterHashesMismatch, given, rec, MetaKey(prefix), MetaCounterHashes, rec)
	}
	return rec, nil
}

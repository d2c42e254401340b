package rlqs

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Report is one instance's demand for one bucket, as Record stores it.
type Report struct {
	// Bucket names the limit the bucket draws on across replicas
	// (CounterKey): usually the bucket alone, several buckets when a
	// share_threshold wildcard folds their values into one counter.
	Bucket string
	// Instance names the Envoy instance that reported and its bucket
	// (the two share the limit with the other such pairs).
	Instance string
	// PerSecond is its demand (allowed+denied per second) over its last
	// report; Unknown when it has not reported a full interval yet.
	PerSecond float64
	Unknown   bool
}

// InstanceDemand is one instance's stored demand for a bucket.
type InstanceDemand struct {
	Instance  string
	PerSecond float64
	Unknown   bool
}

// MemUsage keeps demand in process: enough for one replica. It is safe
// for concurrent use; its zero value is not usable, see NewMemUsage.
// A bucket's map is deleted with its last entry: expired entries are swept
// at most once a TTL across every bucket (so a bucket nobody reports
// again goes too), and Forget deletes at once.
type MemUsage struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[string]map[string]memEntry
	// swept is when the last sweep ran.
	swept time.Time
}

type memEntry struct {
	d       InstanceDemand
	expires time.Time
}

// NewMemUsage returns an in-process store whose entries live for ttl.
func NewMemUsage(ttl time.Duration) *MemUsage {
	return &MemUsage{ttl: ttl, m: map[string]map[string]memEntry{}}
}

// Record stores reps and returns each bucket's live demands.
func (u *MemUsage) Record(_ context.Context, now time.Time, reps []Report) ([][]InstanceDemand, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.sweep(now)
	out := make([][]InstanceDemand, len(reps))
	for i, r := range reps {
		b := u.m[r.Bucket]
		if b == nil {
			b = map[string]memEntry{}
			u.m[r.Bucket] = b
		}
		b[r.Instance] = memEntry{d: InstanceDemand{Instance: r.Instance, PerSecond: r.PerSecond, Unknown: r.Unknown}, expires: now.Add(u.ttl)}
		for inst, e := range b {
			if !e.expires.After(now) {
				delete(b, inst)
				continue
			}
			out[i] = append(out[i], e.d)
		}
	}
	return out, nil
}

// Demands returns each bucket's live demands without recording any.
func (u *MemUsage) Demands(_ context.Context, now time.Time, buckets []string) ([][]InstanceDemand, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.sweep(now)
	out := make([][]InstanceDemand, len(buckets))
	for i, key := range buckets {
		for _, e := range u.m[key] {
			if e.expires.After(now) {
				out[i] = append(out[i], e.d)
			}
		}
	}
	return out, nil
}

// Forget deletes reps' entries, and a bucket's map with its last entry.
func (u *MemUsage) Forget(_ context.Context, reps []Report) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, r := range reps {
		if b := u.m[r.Bucket]; b != nil {
			delete(b, r.Instance)
			if len(b) == 0 {
				delete(u.m, r.Bucket)
			}
		}
	}
	return nil
}

// sweep deletes expired entries and empty buckets, at most once a TTL so
// that its cost (every entry) is spread over a TTL's calls; u.mu is held.
func (u *MemUsage) sweep(now time.Time) {
	if now.Sub(u.swept) < u.ttl {
		return
	}
	u.swept = now
	for key, b := range u.m {
		for inst, e := range b {
			if !e.expires.After(now) {
				delete(b, inst)
			}
		}
		if len(b) == 0 {
			delete(u.m, key)
		}
	}
}

// RedisUsage keeps demand in Redis so every replica sees every instance:
// one hash per bucket, a field per instance whose value is
// "<per second>|<expiry unix ms>" ("inf" for an unknown demand). Fields
// past their expiry are ignored and removed; the hash itself expires two
// TTLs after its last write, so an abandoned bucket leaves nothing behind.
type RedisUsage struct {
	c      redis.Cmdable
	prefix string
	ttl    time.Duration
}

// NewRedisUsage returns a Redis store under key prefix prefix whose
// entries live for ttl.
func NewRedisUsage(c redis.Cmdable, prefix string, ttl time.Duration) *RedisUsage {
	return &RedisUsage{c: c, prefix: usagePrefix(prefix), ttl: ttl}
}

// Record stores reps and returns each bucket's live demands: one pipeline
// of HSET, PEXPIRE and HGETALL per report.
func (u *RedisUsage) Record(ctx context.Context, now time.Time, reps []Report) ([][]InstanceDemand, error) {
	expires := now.Add(u.ttl).UnixMilli()
	pipe := u.c.Pipeline()
	gets := make([]*redis.MapStringStringCmd, len(reps))
	for i, r := range reps {
		key := usageKey(u.prefix, r.Bucket)
		pipe.HSet(ctx, key, r.Instance, encodeDemand(r, expires))
		pipe.PExpire(ctx, key, 2*u.ttl)
		gets[i] = pipe.HGetAll(ctx, key)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("rlqs: recording usage in redis: %w", err)
	}
	keys := make([]string, len(reps))
	for i, r := range reps {
		keys[i] = usageKey(u.prefix, r.Bucket)
	}
	return u.live(ctx, now, keys, gets), nil
}

// Demands returns each bucket's live demands without recording any: one
// pipeline of HGETALL.
func (u *RedisUsage) Demands(ctx context.Context, now time.Time, buckets []string) ([][]InstanceDemand, error) {
	pipe := u.c.Pipeline()
	gets := make([]*redis.MapStringStringCmd, len(buckets))
	keys := make([]string, len(buckets))
	for i, b := range buckets {
		keys[i] = usageKey(u.prefix, b)
		gets[i] = pipe.HGetAll(ctx, keys[i])
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("rlqs: reading usage from redis: %w", err)
	}
	return u.live(ctx, now, keys, gets), nil
}

// Forget deletes reps' fields: one pipeline of HDEL. Redis deletes a hash
// with its last field.
func (u *RedisUsage) Forget(ctx context.Context, reps []Report) error {
	_, err := u.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, r := range reps {
			p.HDel(ctx, usageKey(u.prefix, r.Bucket), r.Instance)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("rlqs: forgetting usage in redis: %w", err)
	}
	return nil
}

// live decodes HGETALL replies into the demands that have not expired,
// and removes the expired and malformed fields.
func (u *RedisUsage) live(ctx context.Context, now time.Time, keys []string, gets []*redis.MapStringStringCmd) [][]InstanceDemand {
	out := make([][]InstanceDemand, len(gets))
	var stale []func(redis.Pipeliner)
	nowMS := now.UnixMilli()
	for i, g := range gets {
		for inst, v := range g.Val() {
			d, exp, err := decodeDemand(v)
			if err != nil || exp <= nowMS {
				key, field := keys[i], inst
				stale = append(stale, func(p redis.Pipeliner) { p.HDel(ctx, key, field) })
				continue
			}
			d.Instance = inst
			out[i] = append(out[i], d)
		}
	}
	if len(stale) > 0 {
		// Best effort: a field left behind is ignored by every reader.
		_, _ = u.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, f := range stale {
				f(p)
			}
			return nil
		})
	}
	return out
}

func encodeDemand(r Report, expiresMS int64) string {
	d := "inf"
	if !r.Unknown {
		d = strconv.FormatFloat(r.PerSecond, 'g', -1, 64)
	}
	return d + "|" + strconv.FormatInt(expiresMS, 10)
}

func decodeDemand(v string) (InstanceDemand, int64, error) {
	ds, es, ok := strings.Cut(v, "|")
	if !ok {
		return InstanceDemand{}, 0, fmt.Errorf("rlqs: malformed usage %q", v)
	}
	exp, err := strconv.ParseInt(es, 10, 64)
	if err != nil {
		return InstanceDemand{}, 0, fmt.Errorf("rlqs: malformed usage expiry %q: %w", v, err)
	}
	if ds == "inf" {
		return InstanceDemand{Unknown: true, PerSecond: math.Inf(1)}, exp, nil
	}
	f, err := strconv.ParseFloat(ds, 64)
	if err != nil || f < 0 {
		return InstanceDemand{}, 0, fmt.Errorf("rlqs: malformed usage demand %q", v)
	}
	return InstanceDemand{PerSecond: f}, exp, nil
}

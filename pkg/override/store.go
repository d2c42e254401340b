package override

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Store keeps overrides where every replica finds them. A Table is its only
// caller; the methods must be safe for concurrent use. Stores keep expired
// entries until they are deleted: the Table filters them by Expires.
type Store interface {
	// Load returns every stored override.
	Load(ctx context.Context) ([]Override, error)
	// Put stores o, replacing the override of the same limit and source.
	Put(ctx context.Context, o Override) error
	// Delete removes the overrides with these identities.
	Delete(ctx context.Context, ids ...ID) error
	// Lock takes the lock name for ttl, reporting whether this caller got
	// it; nobody else gets it before ttl ends. It is how one replica
	// among several acts per interval (the adaptive controller).
	Lock(ctx context.Context, name string, ttl time.Duration) (bool, error)
}

// MemStore is the in-process Store, for the embedded (no Redis) mode. The
// zero value is empty and ready; it is safe for concurrent use.
type MemStore struct {
	mu    sync.Mutex
	m     map[ID]Override
	locks map[string]time.Time
	// Now is the clock of Lock; nil means time.Now.
	Now func() time.Time
}

// Load implements Store.
func (s *MemStore) Load(context.Context) ([]Override, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Override, 0, len(s.m))
	for _, o := range s.m {
		out = append(out, o)
	}
	return out, nil
}

// Put implements Store.
func (s *MemStore) Put(_ context.Context, o Override) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[ID]Override{}
	}
	s.m[o.ID()] = o
	return nil
}

// Delete implements Store.
func (s *MemStore) Delete(_ context.Context, ids ...ID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, i := range ids {
		delete(s.m, i)
	}
	return nil
}

// Lock implements Store.
func (s *MemStore) Lock(_ context.Context, name string, ttl time.Duration) (bool, error) {
	now := time.Now()
	if s.Now != nil {
		now = s.Now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Before(s.locks[name]) {
		return false, nil
	}
	if s.locks == nil {
		s.locks = map[string]time.Time{}
	}
	s.locks[name] = now.Add(ttl)
	return true, nil
}

// RedisStore keeps overrides in one Redis hash, one field per limit and
// source, the value the override as JSON. Expired fields stay until a
// Table prunes them; the hash itself expires DefaultMaxTTL after its last
// write, by when every entry in it has expired. It works on standalone,
// Sentinel and Cluster clients alike: everything is one key or shares its
// slot.
type RedisStore struct {
	client redis.UniversalClient
	key    string
	maxTTL time.Duration
}

// NewRedisStore returns a store in the hash key of client; "" means
// DefaultRedisKey. A key of another deployment sharing the Redis must
// differ, and keep one hash tag, so its locks share its slot. maxTTL is the longest override TTL; zero means
// DefaultMaxTTL.
func NewRedisStore(client redis.UniversalClient, key string, maxTTL time.Duration) *RedisStore {
	if key == "" {
		key = DefaultRedisKey
	}
	if maxTTL <= 0 {
		maxTTL = DefaultMaxTTL
	}
	return &RedisStore{client: client, key: key, maxTTL: maxTTL}
}

// field encodes an identity as a JSON array: unambiguous for any domain or
// limit name without an escaping scheme of its own.
func field(i ID) string {
	b, _ := json.Marshal([]string{i.Domain, i.Limit, string(i.Source)})
	return string(b)
}

// Load implements Store. An undecodable field is an error rather than
// skipped: it means another version wrote the hash, and applying part of
// the overrides would be silently wrong.
func (s *RedisStore) Load(ctx context.Context) ([]Override, error) {
	m, err := s.client.HGetAll(ctx, s.key).Result()
	if err != nil {
		return nil, fmt.Errorf("override: load %s: %w", s.key, err)
	}
	out := make([]Override, 0, len(m))
	var errs []error
	for f, v := range m {
		var o Override
		if err := json.Unmarshal([]byte(v), &o); err != nil {
			errs = append(errs, fmt.Errorf("override: load %s field %s: %w", s.key, f, err))
			continue
		}
		out = append(out, o)
	}
	return out, errors.Join(errs...)
}

// Put implements Store.
func (s *RedisStore) Put(ctx context.Context, o Override) error {
	v, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("override: encode: %w", err)
	}
	_, err = s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, s.key, field(o.ID()), v)
		p.PExpire(ctx, s.key, s.maxTTL)
		return nil
	})
	if err != nil {
		return fmt.Errorf("override: put %s: %w", s.key, err)
	}
	return nil
}

// Delete implements Store.
func (s *RedisStore) Delete(ctx context.Context, ids ...ID) error {
	if len(ids) == 0 {
		return nil
	}
	fields := make([]string, len(ids))
	for i, x := range ids {
		fields[i] = field(x)
	}
	if err := s.client.HDel(ctx, s.key, fields...).Err(); err != nil {
		return fmt.Errorf("override: delete from %s: %w", s.key, err)
	}
	return nil
}

// Lock implements Store with SET NX PX, which Redis runs atomically.
func (s *RedisStore) Lock(ctx context.Context, name string, ttl time.Duration) (bool, error) {
	ok, err := s.client.SetNX(ctx, lockKey(s.key, name), "1", ttl).Result()
	if err != nil {
		return false, fmt.Errorf("override: lock %s: %w", name, err)
	}
	return ok, nil
}

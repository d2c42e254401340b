package cli

import (
	"context"
	"fmt"
	"sync/atomic"

	"go.uber.org/zap"
)

// RedisLog is go-redis's logger in this process (cmd/envoy-rls installs
// it). serve points it at its zap logger, so a dial or pool failure is one
// JSON line like every other; the CLI commands leave it silent, because the error
// they print already names what failed, and go-redis's own lines (one per
// retry, with its source file) would only come before it.
type RedisLog struct{ log atomic.Pointer[zap.Logger] }

// Printf is go-redis's logging interface; go-redis calls it from its
// background goroutines too, hence the atomic pointer.
func (r *RedisLog) Printf(_ context.Context, format string, v ...any) {
	if l := r.log.Load(); l != nil {
		l.Warn("redis client", zap.String("detail", fmt.Sprintf(format, v...)))
	}
}

// use sends go-redis's messages to log from now on.
func (r *RedisLog) use(log *zap.Logger) {
	if r != nil {
		r.log.Store(log)
	}
}

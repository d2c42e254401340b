package redisclient

import "time"

// SetTimeouts sets the dial, read and write timeouts of whichever client o
// describes, and makes it honour each call's context deadline on the
// socket too, so a request never waits on Redis past the deadline its
// caller (pkg/failover, or Envoy) gives it. A rate-limit decision sits on
// every request's path, so these are meant to be short; a URL's own
// *_timeout options are overridden.
//
// It also makes a refused connection fail at once (see failFast): a dead
// Redis must cost a request microseconds, not the whole timeout, so that
// the circuit breaker opens from those failures and the failure mode
// answers without waiting.
func (o *Options) SetTimeouts(d time.Duration) {
	switch {
	case o.Simple != nil:
		o.Simple.DialTimeout, o.Simple.ReadTimeout, o.Simple.WriteTimeout = d, d, d
		o.Simple.ContextTimeoutEnabled = true
		failFast(&o.Simple.DialerRetries, &o.Simple.MinRetryBackoff, &o.Simple.MaxRetryBackoff)
	case o.Failover != nil:
		o.Failover.DialTimeout, o.Failover.ReadTimeout, o.Failover.WriteTimeout = d, d, d
		o.Failover.ContextTimeoutEnabled = true
		failFast(&o.Failover.DialerRetries, &o.Failover.MinRetryBackoff, &o.Failover.MaxRetryBackoff)
	case o.Cluster != nil:
		o.Cluster.DialTimeout, o.Cluster.ReadTimeout, o.Cluster.WriteTimeout = d, d, d
		o.Cluster.ContextTimeoutEnabled = true
		failFast(&o.Cluster.DialerRetries, &o.Cluster.MinRetryBackoff, &o.Cluster.MaxRetryBackoff)
	}
}

// failFast sets go-redis's retry policy so that a refused connection fails
// in microseconds. By default go-redis dials 5 times 100 ms apart for each
// connection, and retries each command (3 times standalone, MaxRedirects
// times on a cluster) with a backoff of up to a second, so a dead Redis
// made every call wait its full timeout and the breaker counted timeouts
// instead of refusals. Now one dial per attempt and no sleep between
// attempts: the remaining command retries still replace a connection that
// died (an EOF after a restart, a MOVED after a failover) at no cost, and a
// refused dial is just as refused a microsecond later. The pool keeps
// failing fast too: after PoolSize refused dials it answers with the last
// dial error without dialing until its background probe connects again.
func failFast(dialerRetries *int, minBackoff, maxBackoff *time.Duration) {
	*dialerRetries = 1
	// -1 is go-redis's "no backoff"; 0 would mean its default.
	*minBackoff, *maxBackoff = -1, -1
}

// SetPoolSize sets the connections per node of whichever client o describes.
func (o *Options) SetPoolSize(n int) {
	switch {
	case o.Simple != nil:
		o.Simple.PoolSize = n
	case o.Failover != nil:
		o.Failover.PoolSize = n
	case o.Cluster != nil:
		o.Cluster.PoolSize = n
	}
}

package redisalgo

import "time"

// SetTimeouts sets the dial, read and write timeouts of whichever client o
// describes, and makes it honour each call's context deadline on the
// socket too, so a request never waits on Redis past the deadline its
// caller (pkg/failover, or Envoy) gives it. A rate-limit decision sits on
// every request's path, so these are meant to be short; a URL's own
// *_timeout options are overridden.
func (o *ClientOptions) SetTimeouts(d time.Duration) {
	switch {
	case o.Simple != nil:
		o.Simple.DialTimeout, o.Simple.ReadTimeout, o.Simple.WriteTimeout = d, d, d
		o.Simple.ContextTimeoutEnabled = true
	case o.Failover != nil:
		o.Failover.DialTimeout, o.Failover.ReadTimeout, o.Failover.WriteTimeout = d, d, d
		o.Failover.ContextTimeoutEnabled = true
	case o.Cluster != nil:
		o.Cluster.DialTimeout, o.Cluster.ReadTimeout, o.Cluster.WriteTimeout = d, d, d
		o.Cluster.ContextTimeoutEnabled = true
	}
}

// SetPoolSize sets the connections per node of whichever client o describes.
func (o *ClientOptions) SetPoolSize(n int) {
	switch {
	case o.Simple != nil:
		o.Simple.PoolSize = n
	case o.Failover != nil:
		o.Failover.PoolSize = n
	case o.Cluster != nil:
		o.Cluster.PoolSize = n
	}
}

// Package redisclient builds go-redis clients from a Redis URL and the
// service's settings: standalone, Sentinel and Cluster deployments, AUTH
// and ACL users, TLS files, pool sizes and short timeouts that fail fast
// when Redis refuses connections (options.go). The Client it returns says
// which kind of deployment it talks to, so that callers are told that
// fact instead of probing for it.
//
// It knows nothing about rate limits: it must not import any envoy-rls
// package, and it never connects by itself (the first command does).
package redisclient

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/pkg/tlsfiles"
)

// Mode is the Redis deployment a URL names.
type Mode string

// The deployments New can connect to.
const (
	Standalone Mode = "standalone"
	Sentinel   Mode = "sentinel"
	Cluster    Mode = "cluster"
)

// Options is a parsed Redis URL. Exactly one of Simple, Failover and
// Cluster is set, matching Mode. Keeping go-redis's own option structs (not
// a lossy conversion to UniversalOptions) means every query parameter
// go-redis understands takes effect.
type Options struct {
	Mode     Mode
	Simple   *redis.Options
	Failover *redis.FailoverOptions
	Cluster  *redis.ClusterOptions
}

// ParseURL parses a Redis URL:
//
//	redis://[user:pass@]host:port[/db][?opts]            standalone
//	rediss://[user:pass@]host:port[/db][?opts]           standalone over TLS
//	unix://[user:pass@]/path/to/socket[?db=N&opts]       standalone on a unix socket
//	redis+sentinel://[user:pass@]h1:p1,h2:p2/master[/db][?opts]
//	redis+cluster://[user:pass@]h1:p1,h2:p2[?opts]
//
// The +sentinel and +cluster schemes also come as rediss+sentinel and
// rediss+cluster for TLS. user:pass authenticate to the data nodes (AUTH or
// an ACL user); for Sentinel, sentinel_username and sentinel_password in the
// query authenticate to the sentinels. opts are go-redis's snake_case option
// names, e.g. pool_size=50&dial_timeout=250ms&read_timeout=100ms
// (a bare number means seconds); unknown options are errors. A bare
// host:port, as envoyproxy/ratelimit's REDIS_URL takes it, means
// redis://host:port.
func ParseURL(raw string) (*Options, error) {
	scheme, _, ok := strings.Cut(raw, "://")
	if !ok {
		// envoyproxy/ratelimit's REDIS_URL for a single TCP node is a bare
		// host:port; accepting it unchanged lets its deployments move over
		// without rewriting the setting.
		if !isHostPort(raw) {
			return nil, fmt.Errorf("redisclient: redis URL %q: missing scheme (want redis://, rediss://, unix://, redis+sentinel:// or redis+cluster://, or a bare host:port)", redact(raw))
		}
		raw, scheme = "redis://"+raw, "redis"
	}
	var (
		o   = &Options{}
		err error
	)
	switch scheme {
	case "redis", "rediss", "unix":
		o.Mode = Standalone
		o.Simple, err = redis.ParseURL(raw)
	case "redis+sentinel", "rediss+sentinel":
		o.Mode = Sentinel
		o.Failover, err = parseSentinelURL(raw)
	case "redis+cluster", "rediss+cluster":
		o.Mode = Cluster
		o.Cluster, err = parseClusterURL(raw)
	default:
		return nil, fmt.Errorf("redisclient: redis URL %q: unknown scheme %q (want redis, rediss, unix, redis+sentinel, rediss+sentinel, redis+cluster or rediss+cluster)", redact(raw), scheme)
	}
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		// url.Error quotes the whole URL, password included.
		err = ue.Err
	}
	if err != nil {
		return nil, fmt.Errorf("redisclient: redis URL %q: %w", redact(raw), err)
	}
	return o, nil
}

// isHostPort reports whether s is host:port with a port in 1-65535 (an
// empty host meaning the local one, as in net.Dial).
func isHostPort(s string) bool {
	host, port, err := net.SplitHostPort(s)
	if err != nil || strings.ContainsAny(host, "/@?#") {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n > 0 && n <= 65535
}

// multiHost splits a +sentinel or +cluster URL, whose authority holds a
// comma-separated host list that net/url cannot parse, into a URL with the
// first host only (so net/url decodes user info, path and query) and every
// host, each checked to be host:port.
func multiHost(raw string) (*url.URL, []string, error) {
	scheme, rest, _ := strings.Cut(raw, "://")
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	userinfo := ""
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		userinfo, authority = authority[:i+1], authority[i+1:]
	}
	if authority == "" {
		return nil, nil, errors.New("no host (want host:port[,host:port...])")
	}
	hosts := strings.Split(authority, ",")
	for _, h := range hosts {
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			return nil, nil, fmt.Errorf("host %q: want host:port", h)
		}
		if n, err := strconv.Atoi(port); host == "" || err != nil || n <= 0 || n > 65535 {
			return nil, nil, fmt.Errorf("host %q: want host:port with a port in 1-65535", h)
		}
	}
	base := "redis"
	if strings.HasPrefix(scheme, "rediss") {
		base = "rediss"
	}
	u, err := url.Parse(base + "://" + userinfo + hosts[0] + tail)
	if err != nil {
		return nil, nil, err
	}
	if u.Fragment != "" {
		return nil, nil, fmt.Errorf("unexpected fragment #%s", u.Fragment)
	}
	return u, hosts, nil
}

// parseSentinelURL maps redis+sentinel://[user:pass@]h1:p1,h2:p2/master[/db]
// onto go-redis's failover URL (sentinel credentials in the user info, the
// data nodes' in the query, the master and extra sentinels in the query).
func parseSentinelURL(raw string) (*redis.FailoverOptions, error) {
	u, hosts, err := multiHost(raw)
	if err != nil {
		return nil, err
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("query: %w", err)
	}
	segs := strings.FieldsFunc(u.Path, func(r rune) bool { return r == '/' })
	if len(segs) > 2 {
		return nil, fmt.Errorf("path %q: want /<master>[/<db>]", u.Path)
	}
	if len(segs) == 0 {
		return nil, errors.New("no master name (want redis+sentinel://host:port,host:port/<master>)")
	}
	if q.Has("master_name") {
		return nil, errors.New("master name given twice (path and master_name)")
	}
	for _, k := range []string{"username", "password", "addr"} {
		if q.Has(k) {
			return nil, fmt.Errorf("option %q: put it in the URL itself", k)
		}
	}
	q.Set("master_name", segs[0])
	u.Path = ""
	if len(segs) == 2 {
		u.Path = "/" + segs[1]
	}
	if u.User != nil {
		q.Set("username", u.User.Username())
		if p, ok := u.User.Password(); ok {
			q.Set("password", p)
		}
	}
	u.User = nil
	if su, sp := q.Get("sentinel_username"), q.Get("sentinel_password"); su != "" || sp != "" {
		u.User = url.UserPassword(su, sp)
	}
	q.Del("sentinel_username")
	q.Del("sentinel_password")
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	u.RawQuery = q.Encode()
	o, err := redis.ParseFailoverURL(u.String())
	if err != nil {
		return nil, err
	}
	// go-redis panics on these for a failover client; they need a
	// replica-reading client envoy-rls does not use (counters live on the
	// master).
	if o.RouteByLatency || o.RouteRandomly || o.ReplicaOnly {
		return nil, errors.New("options route_by_latency, route_randomly and replica_only are not supported: rate-limit state is read and written on the master")
	}
	return o, nil
}

// parseClusterURL maps redis+cluster://[user:pass@]h1:p1,h2:p2 onto
// go-redis's cluster URL (extra seeds as addr options).
func parseClusterURL(raw string) (*redis.ClusterOptions, error) {
	u, hosts, err := multiHost(raw)
	if err != nil {
		return nil, err
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("path %q: a cluster has no database number", u.Path)
	}
	u.Path = ""
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("query: %w", err)
	}
	if q.Has("addr") {
		return nil, errors.New(`option "addr": list the seeds in the host part`)
	}
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	u.RawQuery = q.Encode()
	return redis.ParseClusterURL(u.String())
}

// redact hides the password of a URL for error messages.
func redact(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	end := len(rest)
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		end = i
	}
	at := strings.LastIndexByte(rest[:end], '@')
	if at < 0 {
		return raw
	}
	user, _, hasPass := strings.Cut(rest[:at], ":")
	if !hasPass {
		// A lone user info may well be a token.
		return scheme + "://xxxxx" + rest[at:]
	}
	return scheme + "://" + user + ":xxxxx" + rest[at:]
}

// TLSFiles names PEM files for a TLS connection to Redis. Empty fields keep
// the defaults: the system roots and no client certificate.
type TLSFiles struct {
	// CAFile holds the CA certificates that sign the servers' certificates.
	CAFile string
	// CertFile and KeyFile hold a client certificate and its key, for
	// servers that require client authentication. Set both or neither.
	CertFile string
	KeyFile  string
	// ServerName overrides the name verified in the servers' certificates;
	// empty means the host of the URL.
	ServerName string
}

// IsZero reports whether no TLS setting is given.
func (f TLSFiles) IsZero() bool { return f == TLSFiles{} }

// SetTLS loads f into the TLS configuration of o. The URL must already ask
// for TLS (a rediss scheme); TLS files with a plain-text URL are an error
// rather than a silent upgrade or a silently unused flag.
func (o *Options) SetTLS(f TLSFiles) error {
	if f.IsZero() {
		return nil
	}
	cfg := o.tlsConfig()
	if cfg == nil || *cfg == nil {
		return errors.New("redisclient: redis TLS files given but the URL does not use TLS (use a rediss scheme)")
	}
	c := (*cfg).Clone()
	if err := tlsfiles.Load(c, tlsfiles.Files{CA: f.CAFile, Cert: f.CertFile, Key: f.KeyFile}); err != nil {
		return fmt.Errorf("redisclient: redis TLS %w", err)
	}
	if f.ServerName != "" {
		c.ServerName = f.ServerName
	}
	*cfg = c
	return nil
}

func (o *Options) tlsConfig() **tls.Config {
	switch {
	case o.Simple != nil:
		return &o.Simple.TLSConfig
	case o.Failover != nil:
		return &o.Failover.TLSConfig
	case o.Cluster != nil:
		return &o.Cluster.TLSConfig
	}
	return nil
}

// Client is a client for the deployment its Options name. New makes it;
// the zero Client is not usable. Exactly one of Single and Cluster is set.
// Which one is a fact callers need and must not guess from a client's
// type: a Redis backend groups a request's keys by hash slot on a cluster
// only, and a cluster client taken for a single node fails every request
// whose keys span slots with CROSSSLOT.
type Client struct {
	// Single is a standalone client or, for Sentinel, a failover client
	// that follows the master the sentinels name.
	Single *redis.Client
	// Cluster is a Redis Cluster client.
	Cluster *redis.ClusterClient
}

// New returns a client for o: a plain client, a Sentinel-backed failover
// client or a cluster client. It does not connect; the first command does.
func New(o *Options) (*Client, error) {
	switch {
	case o == nil:
		return nil, errors.New("redisclient: New: nil options")
	case o.Simple != nil:
		return &Client{Single: redis.NewClient(o.Simple)}, nil
	case o.Failover != nil:
		return &Client{Single: redis.NewFailoverClient(o.Failover)}, nil
	case o.Cluster != nil:
		return &Client{Cluster: redis.NewClusterClient(o.Cluster)}, nil
	}
	return nil, errors.New("redisclient: New: empty options (want one of Simple, Failover and Cluster)")
}

// Universal returns the client that is set, for commands that work the
// same on every deployment.
func (c *Client) Universal() redis.UniversalClient {
	if c.Cluster != nil {
		return c.Cluster
	}
	return c.Single
}

// Close closes the client and its connections.
func (c *Client) Close() error { return c.Universal().Close() }

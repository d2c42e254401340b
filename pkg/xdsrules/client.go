package xdsrules

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// Backoff is the wait between reconnection attempts: Initial after the
// first failure, doubling up to Max; with Jitter each wait is spread
// uniformly over ±RandomFactor of itself, so that replicas which lost the
// management server together do not come back in lockstep.
type Backoff struct {
	Initial, Max time.Duration
	RandomFactor float64
	Jitter       bool
}

// DefaultBackoff is the backoff of a zero Config.Backoff.
var DefaultBackoff = Backoff{Initial: 500 * time.Millisecond, Max: 30 * time.Second, RandomFactor: 0.5, Jitter: true}

// Validate reports a backoff that cannot work.
func (b Backoff) Validate() error {
	switch {
	case b.Initial <= 0:
		return fmt.Errorf("xdsrules: backoff initial interval %v must be positive", b.Initial)
	case b.Max < b.Initial:
		return fmt.Errorf("xdsrules: backoff max interval %v must be at least the initial interval %v", b.Max, b.Initial)
	case b.RandomFactor < 0 || b.RandomFactor >= 1:
		return fmt.Errorf("xdsrules: backoff random factor %v must be in [0, 1)", b.RandomFactor)
	}
	return nil
}

// delay is the wait before reconnection attempt n (0 is the first after a
// failure); u is uniform in [0, 1).
func (b Backoff) delay(n int, u float64) time.Duration {
	d := b.Initial
	for i := 0; i < n && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	if b.Jitter && b.RandomFactor > 0 {
		d = time.Duration(float64(d) * (1 + b.RandomFactor*(2*u-1)))
	}
	return d
}

// Config configures a Client.
type Config struct {
	// Server is the management server's gRPC target (host:port).
	Server string
	// NodeID and NodeMetadata identify this replica to the management
	// server, which picks the snapshot to serve by them.
	NodeID       string
	NodeMetadata map[string]string
	// Backoff is the reconnection backoff; zero means DefaultBackoff.
	Backoff Backoff
	// TLS, when set, secures the connection (its ServerName is the SAN
	// override); nil is plaintext.
	TLS *tls.Config
	// Headers are added to the stream's request metadata (an auth token).
	Headers map[string]string
	// MaxMsgSize bounds a received message in bytes; zero means gRPC's 4 MiB.
	MaxMsgSize int
	// Extensions supply what the proto cannot carry; nil adds nothing.
	Extensions *Extensions
	// Rules are the parse options every push is validated with.
	Rules rules.Options
	// ForceStart makes the client ready before its first config, serving
	// no rules (envoyproxy/ratelimit's FORCE_START_WITHOUT_INITIAL_CONFIG).
	ForceStart bool
	// OnUpdate, when set, is told the result of every push: nil when it
	// was applied, the validation errors when it was refused. It runs on
	// the stream's goroutine and must not block.
	OnUpdate func(err error)
	// Logger receives connection and push events; it is named "xds".
	Logger *zap.Logger
	// Registerer receives the client's metrics; nil registers none.
	Registerer prometheus.Registerer
}

// Client subscribes to RateLimitConfig resources and keeps the snapshot
// they define. Its methods are safe for concurrent use.
type Client struct {
	cfg     Config
	log     *zap.Logger
	metrics *metrics
	cur     atomic.Pointer[rules.Snapshot]
	// version is the version of the snapshot in force, sent back in every
	// request so the server knows what the client has.
	version atomic.Pointer[string]
}

// Validate checks cfg as New does, so that a configuration can be
// checked before anything is built.
func (cfg Config) Validate() error {
	if cfg.Server == "" {
		return errors.New("xdsrules: no management server address (want host:port)")
	}
	if cfg.NodeID == "" {
		return errors.New("xdsrules: no node id (want the id the management server keys its snapshots by)")
	}
	if cfg.Backoff != (Backoff{}) {
		if err := cfg.Backoff.Validate(); err != nil {
			return err
		}
	}
	if cfg.MaxMsgSize < 0 {
		return fmt.Errorf("xdsrules: max message size %d must not be negative", cfg.MaxMsgSize)
	}
	return nil
}

// New checks cfg and returns a client; it connects only in Run.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Backoff == (Backoff{}) {
		cfg.Backoff = DefaultBackoff
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	c := &Client{cfg: cfg, log: log.Named("xds"), metrics: newMetrics(cfg.Registerer)}
	empty := ""
	c.version.Store(&empty)
	if cfg.ForceStart {
		// Serving no rules means answering OK with no limit, as for any
		// domain the rules do not name; a nil snapshot would make the
		// service answer UNAVAILABLE instead.
		none, err := rules.NewSnapshot()
		if err != nil {
			return nil, err
		}
		c.cur.Store(none)
	}
	return c, nil
}

// Current returns the snapshot in force: the last push that validated;
// before the first, nil, or an empty snapshot with ForceStart.
func (c *Client) Current() *rules.Snapshot { return c.cur.Load() }

// Ready reports why the service must not take traffic yet: no config has
// arrived (unless ForceStart). Once a push has applied the client stays
// ready, losing the server included: the last good rules keep deciding.
func (c *Client) Ready(context.Context) error {
	if c.cur.Load() != nil {
		return nil
	}
	return fmt.Errorf("xdsrules: no rate limit config received yet from %s", c.cfg.Server)
}

// Run keeps a subscription open until ctx is done, reconnecting with
// backoff after every loss. It returns nil when ctx is done, or an error
// when the connection cannot be configured at all.
func (c *Client) Run(ctx context.Context) error {
	conn, err := grpc.NewClient(c.cfg.Server, c.dialOptions()...)
	if err != nil {
		return fmt.Errorf("xdsrules: management server %s: %w", c.cfg.Server, err)
	}
	defer conn.Close()
	ads := discovery.NewAggregatedDiscoveryServiceClient(conn)
	for attempt := 0; ; attempt++ {
		got, err := c.stream(ctx, ads)
		c.metrics.connected.Set(0)
		if ctx.Err() != nil {
			return nil
		}
		if got {
			attempt = 0
		}
		wait := c.cfg.Backoff.delay(attempt, rand.Float64())
		c.log.Warn("xds stream lost; keeping the current rules and reconnecting",
			zap.String("server", c.cfg.Server), zap.Duration("backoff", wait), zap.Error(err))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		c.metrics.reconnects.Inc()
	}
}

func (c *Client) dialOptions() []grpc.DialOption {
	creds := insecure.NewCredentials()
	if c.cfg.TLS != nil {
		creds = credentials.NewTLS(c.cfg.TLS)
	}
	b := c.cfg.Backoff
	jitter := 0.0
	if b.Jitter {
		jitter = b.RandomFactor
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		// The channel's own reconnection follows the same backoff as the
		// stream's, so that neither paces the other unseen.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: b.Initial, Multiplier: 2, Jitter: jitter, MaxDelay: b.Max},
			MinConnectTimeout: 20 * time.Second,
		}),
	}
	if c.cfg.MaxMsgSize > 0 {
		opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(c.cfg.MaxMsgSize)))
	}
	return opts
}

// stream runs one ADS stream until it fails; got reports whether the
// server answered at all, which resets the backoff.
func (c *Client) stream(ctx context.Context, ads discovery.AggregatedDiscoveryServiceClient) (got bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for k, v := range c.cfg.Headers {
		ctx = metadata.AppendToOutgoingContext(ctx, k, v)
	}
	// Fail fast while the server is unreachable, so that the wait between
	// attempts is the configured backoff, logged and counted.
	s, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		return false, fmt.Errorf("xdsrules: open stream: %w", err)
	}
	if err := s.Send(c.request("", nil)); err != nil {
		return false, fmt.Errorf("xdsrules: subscribe: %w", err)
	}
	c.metrics.connected.Set(1)
	c.log.Info("xds stream open", zap.String("server", c.cfg.Server), zap.String("node", c.cfg.NodeID))
	// refused is the version of the last push NACKed on this stream.
	var refused string
	for {
		resp, err := s.Recv()
		if err != nil {
			return got, fmt.Errorf("xdsrules: receive: %w", err)
		}
		got = true
		if resp.GetTypeUrl() != TypeURL {
			// Not ours on an aggregated stream: refuse it, naming why.
			err := fmt.Errorf("xdsrules: type %q not subscribed (want %s)", resp.GetTypeUrl(), TypeURL)
			if err := s.Send(c.nack(resp, err)); err != nil {
				return got, fmt.Errorf("xdsrules: nack: %w", err)
			}
			continue
		}
		req := c.apply(resp, refused)
		if req.ErrorDetail != nil {
			if refused == resp.GetVersionInfo() {
				// The server sent again the version just refused, as
				// go-control-plane's cache does for every NACK (the NACK
				// names an older version): answer it at a measured pace,
				// not in a tight loop. A new version ends the wait as soon
				// as this NACK is sent.
				select {
				case <-ctx.Done():
					return got, ctx.Err()
				case <-time.After(min(c.cfg.Backoff.Initial, time.Second)):
				}
			}
			refused = resp.GetVersionInfo()
		} else {
			refused = ""
		}
		if err := s.Send(req); err != nil {
			return got, fmt.Errorf("xdsrules: ack: %w", err)
		}
	}
}

// apply validates one push and, if it validates, makes it the snapshot in
// force; it returns the ACK or NACK to send. refused is the version this
// stream last NACKed: the same version again is refused again, but
// reported (log, OnUpdate) only once.
func (c *Client) apply(resp *discovery.DiscoveryResponse, refused string) *discovery.DiscoveryRequest {
	snap, err := c.decode(resp)
	again := err != nil && resp.GetVersionInfo() == refused
	if c.cfg.OnUpdate != nil && !again {
		c.cfg.OnUpdate(err)
	}
	if err != nil {
		c.metrics.nacks.Inc()
		if !again {
			c.log.Error("xds push refused (NACK); keeping the last good rules",
				zap.String("version", resp.GetVersionInfo()), zap.String("in_force", *c.version.Load()), zap.Error(err))
		}
		return c.nack(resp, err)
	}
	v := resp.GetVersionInfo()
	c.cur.Store(snap)
	c.version.Store(&v)
	c.metrics.applied(v)
	c.log.Info("xds push applied (ACK)", zap.String("version", v),
		zap.Int("domains", len(snap.Domains())), zap.Int("rules", snap.NumRules()))
	return c.request(resp.GetNonce(), nil)
}

func (c *Client) decode(resp *discovery.DiscoveryResponse) (*rules.Snapshot, error) {
	confs := make([]*rlsconf.RateLimitConfig, 0, len(resp.GetResources()))
	var errs []error
	for i, a := range resp.GetResources() {
		conf := &rlsconf.RateLimitConfig{}
		if err := a.UnmarshalTo(conf); err != nil {
			errs = append(errs, fmt.Errorf("xdsrules: resources[%d]: %w (want %s)", i, err, TypeURL))
			continue
		}
		confs = append(confs, conf)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return BuildSnapshot(confs, resp.GetVersionInfo(), c.cfg.Extensions, c.cfg.Rules)
}

func (c *Client) nack(resp *discovery.DiscoveryResponse, err error) *discovery.DiscoveryRequest {
	return c.request(resp.GetNonce(), &statuspb.Status{Code: int32(codes.InvalidArgument), Message: err.Error()})
}

// request is a subscription request: the first of a stream (no nonce),
// an ACK, or a NACK (with detail). Every one carries the version in force,
// which is what a NACK must report as well.
func (c *Client) request(nonce string, detail *statuspb.Status) *discovery.DiscoveryRequest {
	return &discovery.DiscoveryRequest{
		VersionInfo:   *c.version.Load(),
		Node:          c.node(),
		TypeUrl:       TypeURL,
		ResponseNonce: nonce,
		ErrorDetail:   detail,
	}
}

func (c *Client) node() *corev3.Node {
	n := &corev3.Node{Id: c.cfg.NodeID, UserAgentName: "envoy-rls"}
	if len(c.cfg.NodeMetadata) > 0 {
		fields := make(map[string]*structpb.Value, len(c.cfg.NodeMetadata))
		for k, v := range c.cfg.NodeMetadata {
			fields[k] = structpb.NewStringValue(v)
		}
		n.Metadata = &structpb.Struct{Fields: fields}
	}
	return n
}

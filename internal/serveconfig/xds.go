package serveconfig

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"

	flag "github.com/spf13/pflag"

	"github.com/envoy-rls/envoy-rls/internal/flagenv"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
	"github.com/envoy-rls/envoy-rls/pkg/tlsfiles"
	"github.com/envoy-rls/envoy-rls/pkg/xdsrules"
)

// Config sources (--config-source). One or the other, as in
// envoyproxy/ratelimit (CONFIG_TYPE=FILE|GRPC_XDS_SOTW): a domain served
// from two places would need a precedence rule that nobody reading either
// place could see.
const (
	sourceFile = "file"
	sourceXDS  = "xds"
)

// xdsFlags configure the xDS config source.
type xdsFlags struct {
	source       string
	server       string
	nodeID       string
	nodeMetadata string
	headers      string
	useTLS       bool
	tls          tlsClientFiles
	backoff      xdsrules.Backoff
	maxMsgSize   int
	extensions   string
	forceStart   bool
}

// tlsClientFiles name the PEM files of a TLS client.
type tlsClientFiles struct {
	ca, cert, key, san string
}

func (x *xdsFlags) register(fs *flag.FlagSet) {
	d := xdsrules.DefaultBackoff
	fs.StringVar(&x.source, "config-source", sourceFile, "where the rules come from: file (--config-dir, watched) | xds (RateLimitConfig resources from an xDS management server, --xds-server); see docs/xds.md")
	fs.StringVar(&x.server, "xds-server", "localhost:18000", "xDS management server address, host:port (--config-source=xds)")
	fs.StringVar(&x.nodeID, "xds-node-id", "default", "node id sent to the xDS management server, which picks the snapshot to serve by it")
	fs.StringVar(&x.nodeMetadata, "xds-node-metadata", "", "node metadata sent to the xDS management server: comma list of key:value (or key=value)")
	fs.StringVar(&x.headers, "xds-headers", "", "extra request headers on the xDS stream (an auth token): comma list of key:value (or key=value)")
	fs.BoolVar(&x.useTLS, "xds-tls", false, "connect to the xDS management server over TLS (implied by --xds-tls-ca, --xds-tls-cert)")
	fs.StringVar(&x.tls.ca, "xds-tls-ca", "", "PEM CA bundle that signs the xDS management server's certificate; empty: the system roots")
	fs.StringVar(&x.tls.cert, "xds-tls-cert", "", "PEM client certificate for the xDS management server (mTLS); with --xds-tls-key")
	fs.StringVar(&x.tls.key, "xds-tls-key", "", "PEM client key for the xDS management server (mTLS)")
	fs.StringVar(&x.tls.san, "xds-tls-san", "", "name to verify in the xDS management server's certificate instead of the host of --xds-server")
	fs.DurationVar(&x.backoff.Initial, "xds-backoff-initial", d.Initial, "first wait before reconnecting to the xDS management server; doubles on each failure")
	fs.DurationVar(&x.backoff.Max, "xds-backoff-max", d.Max, "longest wait between reconnection attempts to the xDS management server")
	fs.Float64Var(&x.backoff.RandomFactor, "xds-backoff-random-factor", d.RandomFactor, "with --xds-backoff-jitter, each wait is spread uniformly over ± this share of itself; in [0, 1)")
	fs.BoolVar(&x.backoff.Jitter, "xds-backoff-jitter", d.Jitter, "randomize reconnection waits (see --xds-backoff-random-factor) so replicas do not reconnect in lockstep")
	fs.IntVar(&x.maxMsgSize, "xds-max-msg-size", 4<<20, "largest xDS message accepted from the management server, in bytes")
	fs.StringVar(&x.extensions, "xds-extensions-file", "", "YAML file of envoy-rls extensions (algorithm, burst, unit_multiplier, lease, hash_tag, rate_limits) per domain and limit name, which the RateLimitConfig proto cannot carry; see docs/xds.md")
	fs.BoolVar(&x.forceStart, "xds-force-start", false, "be ready before the first xDS config arrives, serving no rules until then (envoyproxy/ratelimit's FORCE_START_WITHOUT_INITIAL_CONFIG)")
}

// validate checks the source choice; the xDS settings are checked when
// the client is built.
func (x *xdsFlags) validate() error {
	switch x.source {
	case sourceFile, sourceXDS:
		return nil
	}
	return fmt.Errorf("--config-source: unknown source %q (want %s|%s)", x.source, sourceFile, sourceXDS)
}

// config is the xDS client the flags describe; the app fills in the
// rules options, the update observer, the logger and the registry.
func (x *xdsFlags) config(opts rules.Options) (*xdsrules.Config, error) {
	meta, err := parsePairs(x.nodeMetadata)
	if err != nil {
		return nil, fmt.Errorf("--xds-node-metadata: %w", err)
	}
	headers, err := parsePairs(x.headers)
	if err != nil {
		return nil, fmt.Errorf("--xds-headers: %w", err)
	}
	tlsCfg, err := x.tlsConfig()
	if err != nil {
		return nil, err
	}
	if err := flagenv.Positive("--xds-max-msg-size", x.maxMsgSize); err != nil {
		return nil, err
	}
	var ext *xdsrules.Extensions
	if x.extensions != "" {
		if ext, err = xdsrules.LoadExtensions(x.extensions, opts); err != nil {
			return nil, fmt.Errorf("--xds-extensions-file: %w", err)
		}
	}
	if err := x.backoff.Validate(); err != nil {
		return nil, fmt.Errorf("--xds-backoff-*: %w", err)
	}
	c := &xdsrules.Config{
		Server: x.server, NodeID: x.nodeID, NodeMetadata: meta, Headers: headers,
		Backoff: x.backoff, TLS: tlsCfg, MaxMsgSize: x.maxMsgSize,
		Extensions: ext, ForceStart: x.forceStart,
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("--xds-*: %w", err)
	}
	return c, nil
}

// tlsConfig returns nil when TLS is off.
func (x *xdsFlags) tlsConfig() (*tls.Config, error) {
	f := x.tls
	if !x.useTLS && f.ca == "" && f.cert == "" && f.key == "" {
		if f.san != "" {
			return nil, errors.New("--xds-tls-san needs --xds-tls (or --xds-tls-ca)")
		}
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.san}
	if (f.cert == "") != (f.key == "") {
		return nil, errors.New("--xds-tls-cert and --xds-tls-key: give both or neither")
	}
	if err := tlsfiles.Load(c, tlsfiles.Files{CA: f.ca, Cert: f.cert, Key: f.key}); err != nil {
		return nil, fmt.Errorf("--xds-tls-ca/--xds-tls-cert/--xds-tls-key: %w", err)
	}
	return c, nil
}

// parsePairs reads "k1:v1,k2=v2": the reference's map format (envconfig's
// key:value) and the key=value people also write.
func parsePairs(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		i := strings.IndexAny(item, ":=")
		if i <= 0 {
			return nil, fmt.Errorf("%q is not key:value (want a comma list of key:value)", item)
		}
		out[strings.TrimSpace(item[:i])] = strings.TrimSpace(item[i+1:])
	}
	return out, nil
}

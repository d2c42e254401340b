package serveconfig

import (
	"errors"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/envoy-rls/envoy-rls/internal/app"
	"github.com/envoy-rls/envoy-rls/internal/flagenv"
	"github.com/envoy-rls/envoy-rls/pkg/override"
)

// adminFlags configure serve's admin API (runtime overrides), the
// adaptive controller and the debug listener's TLS.
type adminFlags struct {
	tokenFile      string
	refresh        time.Duration
	maxTTL         time.Duration
	adaptiveConfig string
	prometheusURL  string
	tls            tlsFlags
}

func (o *adminFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&o.tokenFile, "admin-token-file", "", "file holding the bearer token of the admin API (/admin/ on --debug-addr: runtime overrides), re-read on every call; empty disables the admin API")
	fs.DurationVar(&o.refresh, "override-refresh", override.DefaultRefresh, "how often each replica re-reads the runtime overrides from Redis")
	fs.DurationVar(&o.maxTTL, "override-max-ttl", override.DefaultMaxTTL, "longest TTL a runtime override may have")
	fs.StringVar(&o.adaptiveConfig, "adaptive-config", "", "YAML file of adaptive limit controllers (PromQL signals scaling limits); empty runs none")
	fs.StringVar(&o.prometheusURL, "prometheus-url", "", "Prometheus server the adaptive controllers query, e.g. http://prometheus:9090")
	fs.StringVar(&o.tls.cert, "admin-tls-cert", "", "PEM certificate: serve the debug/admin listener (--debug-addr) over TLS; re-read when the file changes")
	fs.StringVar(&o.tls.key, "admin-tls-key", "", "PEM private key for --admin-tls-cert")
	fs.StringVar(&o.tls.clientCA, "admin-tls-client-ca", "", "PEM CA bundle: every debug/admin client must present a certificate it signed (mTLS), and such a client may use the admin API without the token")
}

// debugTLS returns the debug listener's TLS files; zero when
// --admin-tls-cert is not set.
func (o *adminFlags) debugTLS() (app.TLSFiles, error) {
	return serverTLSFiles("--admin-tls", o.tls.cert, o.tls.key, o.tls.clientCA)
}

func (o *adminFlags) validate() error {
	err := errors.Join(flagenv.Positive("--override-refresh", o.refresh), flagenv.Positive("--override-max-ttl", o.maxTTL))
	if o.adaptiveConfig != "" && o.prometheusURL == "" {
		err = errors.Join(err, errors.New("--adaptive-config: needs --prometheus-url (the server its queries go to)"))
	}
	return err
}

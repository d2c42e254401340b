package serveconfig

import (
	"errors"
	"fmt"
	"strings"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/envoy-rls/envoy-rls/internal/app"
	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
)

// rlqsFlags configure the Rate Limit Quota Service (docs/rlqs.md).
type rlqsFlags struct {
	keyOrder       string
	unknown        string
	failureMode    string
	reportInterval time.Duration
}

func (r *rlqsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&r.keyOrder, "rlqs-key-order", "", "comma-separated RLQS bucket id keys in the order they nest in the rule files (e.g. name,client); keys not listed follow, sorted by name")
	fs.StringVar(&r.unknown, "rlqs-unknown", "allow", "RLQS assignment for a bucket no rule matches: allow | deny")
	fs.StringVar(&r.failureMode, "rlqs-failure-mode", "allow", "RLQS assignment once the usage store (Redis) has failed past the last assignment's TTL: allow | deny")
	fs.DurationVar(&r.reportInterval, "rlqs-report-interval", 5*time.Second, "how often Envoy sends RLQS usage reports (Envoy 1.40 always uses 5s); assignments live 3 intervals")
}

// config checks the flags and returns the app's RLQS config.
func (r *rlqsFlags) config() (app.RLQSConfig, error) {
	c := app.RLQSConfig{ReportInterval: r.reportInterval}
	var errs []error
	var err error
	if c.Unknown, err = rlqs.ParseBlanket(r.unknown); err != nil {
		errs = append(errs, fmt.Errorf("--rlqs-unknown: %w", err))
	}
	if c.FailureMode, err = rlqs.ParseBlanket(r.failureMode); err != nil {
		errs = append(errs, fmt.Errorf("--rlqs-failure-mode: %w", err))
	}
	if r.reportInterval < time.Second || r.reportInterval%time.Second != 0 {
		errs = append(errs, fmt.Errorf("--rlqs-report-interval: %v must be whole seconds, at least 1s (Envoy reads whole seconds)", r.reportInterval))
	}
	for _, k := range strings.Split(r.keyOrder, ",") {
		if k = strings.TrimSpace(k); k != "" {
			c.KeyOrder = append(c.KeyOrder, k)
		}
	}
	return c, errors.Join(errs...)
}

package serveconfig

import (
	"fmt"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/envoy-rls/envoy-rls/internal/flagenv"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// holdFlags configure queue mode (`on_limit: delay`).
type holdFlags struct {
	maxDelay time.Duration
	maxHeld  int
}

func (h *holdFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&h.maxDelay, "max-delay", rules.DefaultMaxDelay, "longest max_delay a rule with on_limit: delay may set; keep it below the rate_limit filter timeout of every Envoy that calls this service, or Envoy gives up first")
	fs.IntVar(&h.maxHeld, "max-held", rls.DefaultMaxHeld, "most requests held at once by on_limit: delay; past it, requests that would queue are denied at once (counted in envoy_rls_hold_cap_denials_total)")
}

// check names the flag of a bad value.
func (h *holdFlags) check() error {
	if err := flagenv.Positive("--max-delay", h.maxDelay); err != nil {
		return err
	}
	if h.maxDelay%time.Microsecond != 0 {
		return fmt.Errorf("--max-delay: %v is not a whole number of microseconds", h.maxDelay)
	}
	return flagenv.Positive("--max-held", h.maxHeld)
}

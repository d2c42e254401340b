package dropin

import (
	flag "github.com/spf13/pflag"

	"github.com/envoy-rls/envoy-rls/internal/flagenv"
)

// ApplyRefEnv is Apply's first step, the reference's variables alone, for
// the tests of package dropin_test: they need serve's flag set, whose
// package imports this one.
func ApplyRefEnv(fs *flag.FlagSet, env flagenv.Env) ([]Note, error) {
	return applyRefEnv(fs, ourFlagGiven(fs, env.Lookup), env.Lookup, env.List)
}

package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	flag "github.com/spf13/pflag"
)

// envPrefix names the environment twin of every flag.
const envPrefix = "ENVOY_RLS_"

// envName returns the environment variable for a flag: redis-url → ENVOY_RLS_REDIS_URL.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// applyTwins fills every flag of fs not given on the command line from
// its environment twin, so the command line always wins. It reads each
// flag's Changed mark: cobra parses a command's own flag set, which shares
// the flags of fs (and so their marks) but not fs's record of which were
// set.
func applyTwins(fs *flag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if f.Changed || err != nil {
			return
		}
		name := envName(f.Name)
		v, ok := os.LookupEnv(name)
		if !ok {
			return
		}
		if e := f.Value.Set(v); e != nil {
			err = fmt.Errorf("invalid value %q for %s (flag --%s): %w", v, name, f.Name, e)
		}
	})
	return err
}

// newFlagSet returns a flag set for the command name. Its flags are
// parsed by cobra (cli.go), which adds them to the command's own set.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	return fs
}

// positive is the check of a flag whose value must be above zero: nil, or
// an error naming the flag and the value.
func positive[T int | time.Duration](flag string, v T) error {
	if v > 0 {
		return nil
	}
	return fmt.Errorf("%s: %v must be positive", flag, v)
}

// Package flagenv holds the conventions every envoy-rls command's flags
// follow: each flag has an ENVOY_RLS_* environment twin, which fills the
// flag when the command line does not give it, and a command reads the
// environment only through the Env it is handed, so that a test can hand
// it another. It knows no command and no flag by name; it must not import
// any other envoy-rls package.
package flagenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	flag "github.com/spf13/pflag"
)

// Lookup reads one environment variable (os.LookupEnv in the binary).
type Lookup func(string) (string, bool)

// Env is what a command reads besides its arguments: the process's
// environment and the name it was started as.
type Env struct {
	Lookup Lookup
	List   []string // KEY=value, as os.Environ
	Name   string   // argv[0]'s base name
}

// ProcessEnv is the environment of this process, started as name.
func ProcessEnv(name string) Env {
	return Env{Lookup: os.LookupEnv, List: os.Environ(), Name: filepath.Base(name)}
}

// MapEnv is an environment holding only env, started as name: what tests
// run a command in, apart from the process's own.
func MapEnv(env map[string]string, name string) Env {
	list := make([]string, 0, len(env))
	for k, v := range env {
		list = append(list, k+"="+v)
	}
	return Env{
		Lookup: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		List:   list,
		Name:   name,
	}
}

// prefix names the environment twin of every flag.
const prefix = "ENVOY_RLS_"

// Name returns the environment variable for a flag: redis-url → ENVOY_RLS_REDIS_URL.
func Name(flagName string) string {
	return prefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// ApplyTwins fills every flag of fs not given on the command line from
// its environment twin, so the command line always wins. It reads each
// flag's Changed mark: cobra parses a command's own flag set, which shares
// the flags of fs (and so their marks) but not fs's record of which were
// set.
func ApplyTwins(fs *flag.FlagSet, get Lookup) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if f.Changed || err != nil {
			return
		}
		name := Name(f.Name)
		v, ok := get(name)
		if !ok {
			return
		}
		if e := f.Value.Set(v); e != nil {
			err = fmt.Errorf("invalid value %q for %s (flag --%s): %w", v, name, f.Name, e)
		}
	})
	return err
}

// Given reports whether the flag name of fs was set by the user: on the
// command line, or through its environment twin.
func Given(fs *flag.FlagSet, get Lookup, name string) bool {
	if fs.Changed(name) {
		return true
	}
	_, ok := get(Name(name))
	return ok
}

// NewFlagSet returns a flag set for the command name. Its flags are
// parsed by cobra (internal/cli), which adds them to the command's own
// set.
func NewFlagSet(name string) *flag.FlagSet {
	return flag.NewFlagSet(name, flag.ContinueOnError)
}

// Positive is the check of a flag whose value must be above zero: nil, or
// an error naming the flag and the value.
func Positive[T int | time.Duration](flag string, v T) error {
	if v > 0 {
		return nil
	}
	return fmt.Errorf("%s: %v must be positive", flag, v)
}

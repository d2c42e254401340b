package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// validate checks a rules directory the way serve would load it and lists
// every problem, so users can run it in their own CI.
func validate(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("validate", stderr)
	defaultAlgorithm := fs.String("default-algorithm", "sliding_window", "algorithm for rules that name none: "+algo.AlgorithmNames())
	slidingLogCap := fs.Int("sliding-log-cap", int(algo.DefaultSlidingLogCap), "largest requests_per_unit a sliding_log rule may have")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: envoy-rls validate [flags] DIR\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "envoy-rls validate: %v\n", err)
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "envoy-rls validate: want exactly one directory argument")
		fs.Usage()
		return 2
	}
	alg, err := algo.ParseAlgorithm(*defaultAlgorithm)
	if err != nil {
		fmt.Fprintf(stderr, "envoy-rls validate: --default-algorithm: %v\n", err)
		return 2
	}
	// Zero would silently mean the default to rules.Options: reject what
	// serve rejects, so a config that validates is one serve loads.
	if err := algo.ValidateSlidingLogCap(int64(*slidingLogCap)); err != nil {
		fmt.Fprintf(stderr, "envoy-rls validate: --sliding-log-cap: %v\n", err)
		return 2
	}
	summary, err := rules.Validate(fs.Arg(0), rules.Options{DefaultAlgorithm: alg, SlidingLogCap: int64(*slidingLogCap)})
	if err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, summary)
	return 0
}

// Command envoy-rls is a rate-limit service for Envoy and Istio. This
// package only reads flags and environment, wires the packages under pkg/
// together and handles signals; the behaviour lives in those packages.
package main

import (
	"fmt"
	"io"
	"os"
)

// version is stamped at build time with -ldflags "-X main.version=…".
var version = "dev"

const usage = `usage: envoy-rls <command> [flags]

commands:
  serve      run the rate-limit service (the default when no command is given)
  validate   check a rules directory: envoy-rls validate DIR
  check      ask a running service for a decision
  explain    why a request is limited: the matched rule, limits, Redis keys,
             and live (--addr) each counter's state, consuming nothing
  inspect    what is in Redis: envoy-rls's keys decoded and summarised,
             read-only
  override   set, list or clear runtime limit overrides: envoy-rls override set|list|clear
  version    print the version

Run "envoy-rls <command> -h" for a command's flags. Every flag has an
environment twin: --redis-url is ENVOY_RLS_REDIS_URL.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches a subcommand and returns the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && isHelp(args[0]) {
		printHelp(stdout)
		return 0
	}
	// serve is the default so that the image's /bin/ratelimit, which
	// envoyproxy/ratelimit deployments run with no arguments, serves from
	// that project's environment (refenv.go) whatever argv[0] is.
	cmd := "serve"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(args, stderr)
	case "validate":
		return validate(args, stdout, stderr)
	case "check":
		return check(args, stdout, stderr)
	case "explain":
		return explainCmd(args, stdout, stderr)
	case "inspect":
		return inspectCmd(args, stdout, stderr)
	case "override":
		return overrideCmd(args, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "envoy-rls", version)
		return 0
	}
	fmt.Fprintf(stderr, "envoy-rls: unknown command %q\n\n%s", cmd, usage)
	return 2
}

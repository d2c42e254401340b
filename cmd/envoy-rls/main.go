// Command envoy-rls is a rate-limit service for Envoy and Istio. This
// package only reads flags, ENVOY_RLS_* variables and envoyproxy/ratelimit's
// variables (refenv.go), turns them into an app.Config, and runs
// internal/app, which wires the packages under pkg/ together, until a
// signal; it starts no goroutine. The CLI commands (validate, check,
// explain, inspect, override) are clients and live here too.
package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
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
  top        the clients each limit denies most, from a running server's
             debug listener (its console's sketch)
  version    print the version

Run "envoy-rls <command> -h" for a command's flags. Every flag has an
environment twin: --redis-url is ENVOY_RLS_REDIS_URL.
`

func main() {
	os.Exit(runIn(processEnv(os.Args[0]), os.Args[1:], os.Stdout, os.Stderr))
}

// run is runIn with this process's environment, started as envoy-rls.
func run(args []string, stdout, stderr io.Writer) int {
	return runIn(processEnv("envoy-rls"), args, stdout, stderr)
}

// commands are the subcommands run dispatches.
var commands = []string{"serve", "validate", "check", "explain", "inspect", "override", "top", "version"}

// isCommand reports whether arg names a subcommand.
func isCommand(arg string) bool { return slices.Contains(commands, arg) }

// runIn dispatches a subcommand and returns the process exit code.
func runIn(env environment, args []string, stdout, stderr io.Writer) int {
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
	} else if c := commandAfterFlags(args); c != "" {
		fmt.Fprintf(stderr, "envoy-rls: the command %q comes first, then its flags: envoy-rls %s [flags]\n", c, c)
		return 2
	}
	switch cmd {
	case "serve":
		return serve(env, args, stderr)
	case "validate":
		return validate(env, args, stdout, stderr)
	case "check":
		return check(args, stdout, stderr)
	case "explain":
		return explainCmd(env, args, stdout, stderr)
	case "inspect":
		return inspectCmd(env, args, stdout, stderr)
	case "override":
		return overrideCmd(args, stdout, stderr)
	case "top":
		return topCmd(args, stdout, stderr)
	case "version":
		if len(args) > 0 {
			fmt.Fprintf(stderr, "envoy-rls version: unexpected argument %q: version takes none\n", args[0])
			return 2
		}
		fmt.Fprintln(stdout, "envoy-rls", version)
		return 0
	}
	fmt.Fprintf(stderr, "envoy-rls: unknown command %q\n\n%s", cmd, usage)
	return 2
}

// commandAfterFlags returns the subcommand named after leading flags
// ("envoy-rls --config-dir x validate y"), or "". Without it those flags
// would go to serve, which would start a server and never return. A
// flag's value is skipped as serve's flag set reads it, so a value that
// happens to be a command's name ("--config-dir version") is not one.
func commandAfterFlags(args []string) string {
	_, fs := serveFlagSet("serve", io.Discard)
	unknown := false // the previous flag is not serve's: it may take a value
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return ""
		case len(a) < 2 || a[0] != '-':
			if isCommand(a) {
				return a
			}
			if !unknown {
				return ""
			}
			unknown = false
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := fs.Lookup(name)
		unknown = f == nil && !hasValue
		if f == nil || hasValue {
			continue
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
			i++ // its value
		}
	}
	return ""
}

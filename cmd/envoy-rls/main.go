// Command envoy-rls is a rate-limit service for Envoy and Istio. This
// package only reads flags, ENVOY_RLS_* variables and envoyproxy/ratelimit's
// variables (refenv.go), turns them into an app.Config, and runs
// internal/app, which wires the packages under pkg/ together, until a
// signal; it starts no goroutine. The CLI commands (validate, check,
// explain, inspect, override) are clients and live here too; cli.go
// builds the command tree.
package main

import (
	"io"
	"os"
)

// version is stamped at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	os.Exit(runIn(processEnv(os.Args[0]), os.Args[1:], os.Stdout, os.Stderr))
}

// run is runIn with this process's environment, started as envoy-rls.
func run(args []string, stdout, stderr io.Writer) int {
	return runIn(processEnv("envoy-rls"), args, stdout, stderr)
}

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

	"github.com/redis/go-redis/v9"
)

// version is stamped at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	// go-redis logs dial and pool failures through one package-level
	// logger, by default as plain lines on stderr ahead of the command's
	// own error. It has no per-client logger, so this one global is
	// unavoidable: it is set here, once, before any client exists, to a
	// logger that serve points at its zap logger and that the CLI commands
	// leave silent (redislog.go).
	env := processEnv(os.Args[0])
	env.redisLog = &redisLog{}
	redis.SetLogger(env.redisLog)
	os.Exit(runIn(env, os.Args[1:], os.Stdout, os.Stderr))
}

// run is runIn with this process's environment, started as envoy-rls.
func run(args []string, stdout, stderr io.Writer) int {
	return runIn(processEnv("envoy-rls"), args, stdout, stderr)
}

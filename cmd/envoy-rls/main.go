// Command envoy-rls is a rate-limit service for Envoy and Istio, and the
// command-line clients of a running one. This package is only the entry
// point: it installs go-redis's logger and hands the process (its
// arguments, environment, version and streams) to internal/cli, which
// builds the command tree; serve's settings become an app.Config in
// internal/serveconfig, the clients live in internal/clients, and
// envoyproxy/ratelimit's environment is read by internal/dropin. It must
// not import any other envoy-rls package than internal/cli and
// internal/flagenv.
package main

import (
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/cli"
	"github.com/envoy-rls/envoy-rls/internal/flagenv"
)

// version is stamped at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	// go-redis logs dial and pool failures through one package-level
	// logger, by default as plain lines on stderr ahead of the command's
	// own error. It has no per-client logger, so this one global is
	// unavoidable: it is set here, once, before any client exists, to a
	// logger that serve points at its zap logger and that the CLI commands
	// leave silent (internal/cli's redislog.go).
	redisLog := &cli.RedisLog{}
	redis.SetLogger(redisLog)
	os.Exit(cli.Run(cli.Process{
		Version:  version,
		Env:      flagenv.ProcessEnv(os.Args[0]),
		RedisLog: redisLog,
		Stdout:   os.Stdout,
		Stderr:   os.Stderr,
	}, os.Args[1:]))
}

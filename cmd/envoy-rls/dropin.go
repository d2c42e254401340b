package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	flag "github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// Drop-in mode makes a deployment of envoyproxy/ratelimit decide as it
// did when only its image changes: the reference has only fixed windows,
// reads every file under its runtime directory (by default
// /srv/runtime_data/current/config), and reads a rate limit without
// requests_per_unit as 0. envoy-rls's own defaults (a sliding
// window, *.yaml files, the field required) differ on purpose, so they
// stay for everyone else; drop-in mode only changes defaults, and a flag
// or ENVOY_RLS_* variable given still wins.

// refName is the reference binary's name, /bin/ratelimit in its image and
// in Istio's sample.
const refName = "ratelimit"

// Values of --drop-in.
const (
	dropInAuto = "auto"
	dropInOn   = "on"
	dropInOff  = "off"
)

// refRuntimeVars are the reference's variables that place its rule
// directory; finding one means the rules are laid out as it reads them.
var refRuntimeVars = []string{"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY"}

// dropIn is the outcome of --drop-in.
type dropIn struct {
	on bool
	// reason says why it is on, for the start-up log.
	reason string
	// files is how the rule directory is read when on.
	files rules.FileLayout
	// algorithm is true when drop-in mode set --default-algorithm.
	algorithm bool
	// charges is true when drop-in mode set --count-denied-hits, as the
	// reference counts denied hits unless its
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT is true.
	charges bool
}

// environment is what a command reads besides its arguments: the
// process's environment and the name it was started as.
type environment struct {
	lookup lookupFunc
	list   []string // KEY=value, as os.Environ
	name   string   // argv[0]'s base name
	// redisLog is go-redis's logger, which serve points at its own; nil
	// where main did not install one (tests).
	redisLog *redisLog
}

// processEnv is the environment of this process, started as name.
func processEnv(name string) environment {
	return environment{lookup: os.LookupEnv, list: os.Environ(), name: filepath.Base(name)}
}

// finish reads what serve and validate read alike after the command line
// cobra parsed into fs, in precedence order: the ENVOY_RLS_* twins of the
// flags not given, envoyproxy/ratelimit's variables, then drop-in mode.
func (c *serveConfig) finish(fs *flag.FlagSet, env environment) error {
	if err := applyTwins(fs); err != nil {
		return err
	}
	return c.applyEnv(fs, env)
}

// applyEnv applies the reference's variables and drop-in mode to flags
// already parsed.
func (c *serveConfig) applyEnv(fs *flag.FlagSet, env environment) error {
	given := ourFlagGiven(fs, env.lookup)
	notes, err := applyRefEnv(fs, given, env.lookup, env.list)
	c.refNotes = notes
	if err != nil {
		return err
	}
	c.dropIn, err = resolveDropIn(c.dropInFlag, given, env)
	if err != nil {
		return err
	}
	if c.dropIn.on && !given("default-algorithm") {
		c.defaultAlgorithm = algo.FixedWindow.String()
		c.dropIn.algorithm = true
	}
	if c.dropIn.on && !given("count-denied-hits") && len(setVars(env.lookup, []string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"})) == 0 {
		c.countDeniedHits = true
		c.dropIn.charges = true
	}
	if c.dropIn.on && !given("config-dir") && len(setVars(env.lookup, refRuntimeVars)) == 0 {
		// The reference's own default, not the image's examples.
		c.configDir = filepath.Join(refRuntimeRoot, refRuntimeAppDir)
	}
	c.refNotes = append(c.refNotes, dotFilesNote(c.dropIn, env.lookup)...)
	if !given("debug-addr") {
		c.refNotes = append(c.refNotes, debugAddrNote(c.http.debugAddr, env.lookup)...)
	}
	return nil
}

// debugAddrNote is the start-up warning of a debug listener that the
// reference's DEBUG_HOST and DEBUG_PORT put beyond loopback. The
// reference binds its debug port on every interface by default, and a
// deployment that sets DEBUG_PORT to move it gets the same here; but this
// listener also serves the console, explain and (with a token) the admin
// API, which envoy-rls otherwise keeps on loopback.
func debugAddrNote(addr string, get lookupFunc) []refNote {
	vars := setVars(get, []string{"DEBUG_HOST", "DEBUG_PORT"})
	if len(vars) == 0 || addr == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || isLoopback(host) {
		return nil
	}
	return []refNote{{warn: true, msg: debugExposedMsg, vars: vars, flag: "debug-addr",
		detail: "listening on " + addr + ", as envoyproxy/ratelimit binds its debug port; whoever reaches it reads the console: keep it on loopback with DEBUG_HOST=127.0.0.1 or --debug-addr 127.0.0.1:" + port + " (ENVOY_RLS_DEBUG_ADDR)"}}
}

// debugExposedMsg is debugAddrNote's message.
const debugExposedMsg = "the debug listener (console, /debug/top, /debug/explain, /admin/) binds beyond loopback"

// isLoopback reports whether host names only the loopback interface.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// resolveDropIn decides drop-in mode from --drop-in: on, off, or (auto)
// on when the binary runs as ratelimit or the reference's RUNTIME_*
// variables chose the rule directory.
func resolveDropIn(mode string, given func(string) bool, env environment) (dropIn, error) {
	var d dropIn
	switch strings.ToLower(mode) {
	case dropInOff:
		return d, nil
	case dropInOn:
		d.on, d.reason = true, "--drop-in=on"
	case dropInAuto:
		if env.name == refName {
			d.on, d.reason = true, "started as "+refName
		} else if found := setVars(env.lookup, refRuntimeVars); len(found) > 0 && !given("config-dir") {
			d.on, d.reason = true, strings.Join(found, ", ")+" set the rule directory"
		}
	default:
		return d, fmt.Errorf("--drop-in: unknown mode %q (want auto|on|off)", mode)
	}
	if !d.on {
		return d, nil
	}
	ignore, err := isTrue(env.lookup, "RUNTIME_IGNOREDOTFILES")
	if err != nil {
		return d, err
	}
	d.files = rules.FileLayout{Reference: true, DotFiles: !ignore}
	return d, nil
}

// dotFilesNote is the start-up line about RUNTIME_IGNOREDOTFILES: it
// takes effect in drop-in mode only.
func dotFilesNote(d dropIn, get lookupFunc) []refNote {
	vars := setVars(get, []string{"RUNTIME_IGNOREDOTFILES"})
	switch {
	case len(vars) == 0:
		return nil
	case d.on:
		return []refNote{{msg: "envoyproxy/ratelimit setting mapped", vars: vars, detail: "drop-in mode reads the rule directory as " + d.files.String()}}
	}
	return []refNote{{msg: "envoyproxy/ratelimit setting has no effect as set (its switch is off)", vars: vars,
		detail: "outside drop-in mode (--drop-in) only *.yaml and *.yml files of --config-dir are read, dotfiles never"}}
}

// logDropIn states drop-in mode at start, with how to opt out of each
// default it changed.
func logDropIn(log *zap.Logger, c *serveConfig) {
	d := c.dropIn
	if !d.on {
		return
	}
	fields := []zap.Field{
		zap.String("reason", d.reason),
		zap.String("default_algorithm", c.defaultAlgorithm),
		zap.String("config_dir", c.configDir),
		zap.String("rule_files", d.files.String()),
		zap.String("requests_per_unit", "a rate limit without it is read as 0 (every request denied), with a warning naming its file and line"),
		zap.String("opt_out", "--drop-in=off (ENVOY_RLS_DROP_IN=off) restores envoy-rls's own defaults"),
	}
	if d.algorithm {
		fields = append(fields, zap.String("algorithms", "fixed_window is envoyproxy/ratelimit's only algorithm; set --default-algorithm (ENVOY_RLS_DEFAULT_ALGORITHM) to one of "+
			algo.AlgorithmNames()+" for every rule, or algorithm: on a rate_limit for one"))
	}
	if d.charges {
		fields = append(fields, zap.String("costs", "every limit that names no cost is cost: charge (--count-denied-hits), counting denied hits as envoyproxy/ratelimit does unless STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true; set that, or --count-denied-hits=false, to count only admitted requests"))
	}
	log.Info("drop-in mode: envoyproxy/ratelimit's defaults", fields...)
}

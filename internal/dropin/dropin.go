// Package dropin reads envoyproxy/ratelimit's environment for serve and
// for the commands that take serve's flags (validate, explain, inspect):
// which of the reference's variables sets which flag and how its value
// converts, what the variables it has no equivalent for should be
// replaced by, and drop-in mode, which gives a deployment of the
// reference the reference's defaults. It knows the flags by name only,
// sets them through the flag set it is handed, and builds no
// configuration: it must not import internal/app, internal/serveconfig
// or internal/cli.
package dropin

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"

	flag "github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/envoy-rls/envoy-rls/internal/flagenv"
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

// RefName is the reference binary's name, /bin/ratelimit in its image and
// in Istio's sample.
const RefName = "ratelimit"

// Values of --drop-in; Auto is its default.
const (
	Auto = "auto"
	On   = "on"
	Off  = "off"
)

// refRuntimeVars are the reference's variables that place its rule
// directory; finding one means the rules are laid out as it reads them.
var refRuntimeVars = []string{"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY"}

// Mode is the outcome of --drop-in.
type Mode struct {
	On bool
	// Reason says why it is on, for the start-up log.
	Reason string
	// Files is how the rule directory is read when on.
	Files rules.FileLayout
	// algorithm is true when drop-in mode set --default-algorithm.
	algorithm bool
	// charges is true when drop-in mode set --count-denied-hits, as the
	// reference counts denied hits unless its
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT is true.
	charges bool
}

// Apply reads what serve and the commands that take its flags read
// after the command line and the ENVOY_RLS_* twins set fs, in precedence
// order: envoyproxy/ratelimit's variables, then drop-in mode (--drop-in),
// whose defaults it sets on the flags nobody gave. It returns the mode
// and the notes to log at start; the notes are returned with an error
// too.
func Apply(fs *flag.FlagSet, env flagenv.Env) (Mode, []Note, error) {
	given := ourFlagGiven(fs, env.Lookup)
	notes, err := applyRefEnv(fs, given, env.Lookup, env.List)
	if err != nil {
		return Mode{}, notes, err
	}
	d, err := resolveDropIn(flagValue(fs, "drop-in"), given, env)
	if err != nil {
		return d, notes, err
	}
	if d.On && !given("default-algorithm") {
		if err := setFlag(fs, "default-algorithm", algo.FixedWindow.String()); err != nil {
			return d, notes, err
		}
		d.algorithm = true
	}
	if d.On && !given("count-denied-hits") && len(setVars(env.Lookup, []string{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"})) == 0 {
		if err := setFlag(fs, "count-denied-hits", "true"); err != nil {
			return d, notes, err
		}
		d.charges = true
	}
	if d.On && !given("config-dir") && len(setVars(env.Lookup, refRuntimeVars)) == 0 {
		// The reference's own default, not the image's examples.
		if err := setFlag(fs, "config-dir", filepath.Join(refRuntimeRoot, refRuntimeAppDir)); err != nil {
			return d, notes, err
		}
	}
	notes = append(notes, dotFilesNote(d, env.Lookup)...)
	if !given("debug-addr") {
		notes = append(notes, debugAddrNote(flagValue(fs, "debug-addr"), env.Lookup)...)
	}
	return d, notes, nil
}

// flagValue is the value of fs's flag name, "" when fs has no such flag.
func flagValue(fs *flag.FlagSet, name string) string {
	if f := fs.Lookup(name); f != nil {
		return f.Value.String()
	}
	return ""
}

// setFlag sets a default of drop-in mode: the value, not the Changed mark,
// so that it still reads as not given.
func setFlag(fs *flag.FlagSet, name, value string) error {
	f := fs.Lookup(name)
	if f == nil {
		return fmt.Errorf("drop-in mode: no flag --%s to set", name)
	}
	if err := f.Value.Set(value); err != nil {
		return fmt.Errorf("drop-in mode: --%s=%s: %w", name, value, err)
	}
	return nil
}

// debugAddrNote is the start-up warning of a debug listener that the
// reference's DEBUG_HOST and DEBUG_PORT put beyond loopback. The
// reference binds its debug port on every interface by default, and a
// deployment that sets DEBUG_PORT to move it gets the same here; but this
// listener also serves the console, explain and (with a token) the admin
// API, which envoy-rls otherwise keeps on loopback.
func debugAddrNote(addr string, get lookupFunc) []Note {
	vars := setVars(get, []string{"DEBUG_HOST", "DEBUG_PORT"})
	if len(vars) == 0 || addr == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || isLoopback(host) {
		return nil
	}
	return []Note{{Warn: true, Msg: DebugExposedMsg, Vars: vars, Flag: "debug-addr",
		Detail: "listening on " + addr + ", as envoyproxy/ratelimit binds its debug port; whoever reaches it reads the console: keep it on loopback with DEBUG_HOST=127.0.0.1 or --debug-addr 127.0.0.1:" + port + " (ENVOY_RLS_DEBUG_ADDR)"}}
}

// DebugExposedMsg is the message of the warning of a debug listener that
// the reference's DEBUG_HOST and DEBUG_PORT put beyond loopback.
const DebugExposedMsg = "the debug listener (console, /debug/top, /debug/explain, /admin/) binds beyond loopback"

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
func resolveDropIn(mode string, given func(string) bool, env flagenv.Env) (Mode, error) {
	var d Mode
	switch strings.ToLower(mode) {
	case Off:
		return d, nil
	case On:
		d.On, d.Reason = true, "--drop-in=on"
	case Auto:
		if env.Name == RefName {
			d.On, d.Reason = true, "started as "+RefName
		} else if found := setVars(env.Lookup, refRuntimeVars); len(found) > 0 && !given("config-dir") {
			d.On, d.Reason = true, strings.Join(found, ", ")+" set the rule directory"
		}
	default:
		return d, fmt.Errorf("--drop-in: unknown mode %q (want auto|on|off)", mode)
	}
	if !d.On {
		return d, nil
	}
	ignore, err := isTrue(env.Lookup, "RUNTIME_IGNOREDOTFILES")
	if err != nil {
		return d, err
	}
	d.Files = rules.FileLayout{Reference: true, DotFiles: !ignore}
	return d, nil
}

// dotFilesNote is the start-up line about RUNTIME_IGNOREDOTFILES: it
// takes effect in drop-in mode only.
func dotFilesNote(d Mode, get lookupFunc) []Note {
	vars := setVars(get, []string{"RUNTIME_IGNOREDOTFILES"})
	switch {
	case len(vars) == 0:
		return nil
	case d.On:
		return []Note{{Msg: "envoyproxy/ratelimit setting mapped", Vars: vars, Detail: "drop-in mode reads the rule directory as " + d.Files.String()}}
	}
	return []Note{{Msg: "envoyproxy/ratelimit setting has no effect as set (its switch is off)", Vars: vars,
		Detail: "outside drop-in mode (--drop-in) only *.yaml and *.yml files of --config-dir are read, dotfiles never"}}
}

// Log states drop-in mode at start, with the default algorithm and rule
// directory it resolved to and how to opt out of each default it changed.
func (d Mode) Log(log *zap.Logger, defaultAlgorithm, configDir string) {
	if !d.On {
		return
	}
	fields := []zap.Field{
		zap.String("reason", d.Reason),
		zap.String("default_algorithm", defaultAlgorithm),
		zap.String("config_dir", configDir),
		zap.String("rule_files", d.Files.String()),
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

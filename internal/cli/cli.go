// Package cli is envoy-rls's command line: the cobra command tree, each
// command's help and argument checks, the flag conventions (--flag or
// -flag, flags before or after arguments, old flag names) with each
// flag's ENVOY_RLS_* twin named in its help, and the exit codes; Run is
// all cmd/envoy-rls calls. A command's flags and body are elsewhere:
// serve's settings in internal/serveconfig, the clients' in
// internal/clients; serve runs internal/app. It must not import the pkg/
// packages: it reaches them only through those.
package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	flag "github.com/spf13/pflag"

	"github.com/envoy-rls/envoy-rls/internal/dropin"
	"github.com/envoy-rls/envoy-rls/internal/flagenv"
)

// The command line follows the convention of kubectl, helm, istioctl and
// egctl (spf13/cobra with spf13/pflag): --flag, flags before or after
// arguments, -h and --help on every command, --version, and
// `completion bash|zsh|fish`. Each command's flag set is defined where
// the command's flags and body live (serveconfig.New, clients.Check, ...);
// cobra parses it,
// and the command's body then applies the ENVOY_RLS_* twins and
// envoyproxy/ratelimit's variables, which cobra knows nothing of.

// cli runs one command line and keeps the exit code its command chose.
type cli struct {
	version        string
	env            flagenv.Env
	redisLog       *RedisLog
	stdout, stderr io.Writer
	code           int
}

// Process is what a command line runs in: besides the arguments, the
// binary's version, the environment, go-redis's logger (which serve
// points at its own; nil where none was installed, as in tests) and the
// standard streams.
type Process struct {
	Version        string
	Env            flagenv.Env
	RedisLog       *RedisLog
	Stdout, Stderr io.Writer
}

// Run runs the command line args in p and returns the process exit code:
// the command's own, or 2 for a command line cobra refused.
func Run(p Process, args []string) int {
	c := &cli{version: p.Version, env: p.Env, redisLog: p.RedisLog, stdout: p.Stdout, stderr: p.Stderr}
	root := c.rootCommand()
	root.SetArgs(longDashes(root, args))
	cmd, err := root.ExecuteC()
	if err != nil {
		fmt.Fprintf(c.stderr, "%s: %v\n", cmd.CommandPath(), err)
		return 2
	}
	return c.code
}

// body adapts a command body, which prints its own errors and returns an
// exit code, to cobra.
func (c *cli) body(run func(args []string) int) func(*cobra.Command, []string) error {
	return func(_ *cobra.Command, args []string) error {
		c.code = run(args)
		return nil
	}
}

const rootLong = `envoy-rls is a rate-limit service for Envoy and Istio: Envoy's rate_limit
filter asks it, over gRPC, whether a request is over a limit, and it
answers from rules in YAML files, with counters in Redis (or, without
--redis-url, in the process).

With no command, envoy-rls serves: started as envoyproxy/ratelimit's
/bin/ratelimit, with that project's environment, it serves as it did.
Every flag has an environment twin: --redis-url is ENVOY_RLS_REDIS_URL.`

const rootExample = `  # serve the example rules on the in-process store (gRPC :8081, HTTP :8080)
  envoy-rls serve --config-dir examples/config

  # check a rule directory, as CI would
  envoy-rls validate examples/config

  # shell completion
  source <(envoy-rls completion bash)`

// rootCommand is envoy-rls: serve when no command is named, so that the
// image's /bin/ratelimit, which envoyproxy/ratelimit deployments run with
// no arguments, serves from that project's environment (internal/dropin)
// whatever argv[0] is.
func (c *cli) rootCommand() *cobra.Command {
	root := c.serveCommand("envoy-rls")
	root.Short = "a rate-limit service for Envoy and Istio"
	root.Long, root.Example = rootLong, rootExample
	root.Version = c.version
	root.SetVersionTemplate("envoy-rls {{.Version}}\n")
	root.SilenceErrors, root.SilenceUsage = true, true
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return fmt.Errorf("%w (%s -h lists the flags)", err, cmd.CommandPath())
	})
	root.SetGlobalNormalizationFunc(oldFlagNames)
	root.AddCommand(c.serveCommand("serve"), c.validateCommand(), c.checkCommand(), c.explainCommand(),
		c.inspectCommand(), c.overrideCommand(), c.topCommand(), c.versionCommand())
	// The root takes serve's flags (it serves when no command is named),
	// but its help is where a newcomer starts: it lists the commands, and
	// leaves serve's ninety flags to `envoy-rls serve -h`.
	commandHelp := root.HelpFunc()
	root.SetHelpFunc(func(cmd *cobra.Command, args []string) {
		if cmd != root {
			commandHelp(cmd, args)
			return
		}
		writeRootHelp(cmd.OutOrStdout(), root)
	})
	return root
}

// writeRootHelp is `envoy-rls --help`: what envoy-rls is, its commands,
// and where each command's flags are listed.
func writeRootHelp(w io.Writer, root *cobra.Command) {
	fmt.Fprintf(w, "%s\n\nUsage:\n  envoy-rls <command> [flags]\n  envoy-rls [flags]   (serve, with serve's flags)\n\nCommands:\n", root.Long)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, sub := range root.Commands() {
		if sub.IsAvailableCommand() || sub.Name() == "help" {
			fmt.Fprintf(tw, "  %s\t%s\n", sub.Name(), sub.Short)
		}
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\nExamples:\n%s\n\nFlags:\n  -h, --help      this help; envoy-rls <command> -h lists a command's flags (envoy-rls serve -h: serve's)\n      --version   print the version\n", root.Example)
}

// oldFlagNames maps flag names of earlier releases onto today's: -d of
// check and explain is --descriptor.
func oldFlagNames(_ *flag.FlagSet, name string) flag.NormalizedName {
	if name == "d" {
		return "descriptor"
	}
	return flag.NormalizedName(name)
}

func (c *cli) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "print the version",
		Example: "  envoy-rls version\n  envoy-rls --version",
		Args:    maxArgs(0),
		RunE: c.body(func([]string) int {
			fmt.Fprintln(c.stdout, "envoy-rls", c.version)
			return 0
		}),
	}
}

// commands are the subcommands envoy-rls has.
var commands = []string{"serve", "validate", "check", "explain", "inspect", "override", "top", "version", "completion", "help"}

// isCommand reports whether arg names a subcommand.
func isCommand(arg string) bool { return slices.Contains(commands, arg) }

// maxArgs is the positional-argument check of a command that takes at
// most n arguments: the error names the first one too many, and says
// where a command's name found there goes.
func maxArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) <= n {
			return nil
		}
		arg := args[n]
		switch {
		case isCommand(arg):
			return fmt.Errorf("the command %q comes first, then its flags: envoy-rls %s [flags]", arg, arg)
		case !cmd.HasParent():
			return fmt.Errorf("unknown command %q: envoy-rls -h lists the commands, and serve, the default, takes no arguments", arg)
		}
		takes := "no arguments"
		if n == 1 {
			takes = "at most one argument"
		}
		return fmt.Errorf("unexpected argument %q: %s takes %s", arg, cmd.CommandPath(), takes)
	}
}

// addFlags adds fs to cmd, each flag's help naming its ENVOY_RLS_* twin
// and, when ref is set (commands that read envoyproxy/ratelimit's
// variables), the reference's variables that set it.
func addFlags(cmd *cobra.Command, fs *flag.FlagSet, ref bool) {
	refVars := map[string][]string{}
	if ref {
		refVars = dropin.FlagVars()
	}
	fs.VisitAll(func(f *flag.Flag) {
		note := "env " + flagenv.Name(f.Name)
		if vars := refVars[f.Name]; len(vars) > 0 {
			note += "; envoyproxy/ratelimit: " + strings.Join(vars, ", ")
		}
		f.Usage += " [" + note + "]"
	})
	cmd.Flags().AddFlagSet(fs)
}

// showOnly hides from cmd's help every flag but names: commands that take
// all of serve's flags (so a Deployment's command line and environment
// work unchanged) but use only a few.
func showOnly(cmd *cobra.Command, names ...string) {
	cmd.Flags().VisitAll(func(f *flag.Flag) {
		f.Hidden = !slices.Contains(names, f.Name)
	})
}

// longDashes rewrites a single-dash long flag (-config-dir) as
// --config-dir. Go's flag package, which envoy-rls parsed with before
// cobra, took both, so command lines written then keep working; -d and
// -h, one letter, are shorthands either way.
func longDashes(root *cobra.Command, args []string) []string {
	names := map[string]bool{"help": true, "version": true}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *flag.Flag) { names[f.Name] = true })
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	out := slices.Clone(args)
	for i, a := range out {
		if a == "--" {
			break
		}
		if len(a) < 3 || a[0] != '-' || a[1] == '-' {
			continue
		}
		if name, _, _ := strings.Cut(a[1:], "="); names[name] {
			out[i] = "-" + a
		}
	}
	return out
}

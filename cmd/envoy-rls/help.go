package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// parseArgs parses args with fs's usage shown only when it was asked for
// (-h): after a mistake the error alone is printed, as one line naming the
// flag, instead of every flag's help with the error buried after it.
func parseArgs(fs *flag.FlagSet, args []string) error {
	out := fs.Output()
	var buf bytes.Buffer
	fs.SetOutput(&buf)
	err := fs.Parse(args)
	fs.SetOutput(out)
	if errors.Is(err, flag.ErrHelp) {
		fs.Usage()
		return err
	}
	if err != nil {
		return fmt.Errorf("%w (envoy-rls %s -h lists the flags)", err, fs.Name())
	}
	return nil
}

// printHelp writes the top-level help: the commands, then the flags of
// serve, the command that runs when none is named.
func printHelp(w io.Writer) {
	fmt.Fprint(w, usage)
	_, fs := serveFlagSet("serve", w)
	fmt.Fprintf(w, "\nserve flags (each also read from %s<NAME>):\n", envPrefix)
	fs.PrintDefaults()
}

// isHelp reports whether arg asks for help rather than naming a flag.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

// printStartError writes why serve could not start, one plain line per
// problem (a rules directory can have several), with no log framing or
// stack: the reader is a person at a terminal or in kubectl logs.
func printStartError(w io.Writer, err error) {
	for _, line := range strings.Split(strings.TrimSpace(err.Error()), "\n") {
		fmt.Fprintf(w, "envoy-rls serve: cannot start: %s\n", line)
	}
}

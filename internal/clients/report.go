package clients

import (
	"encoding/json"
	"fmt"
	"io"
)

// printReport prints a subcommand's report, as indented JSON or through
// text, and returns the exit code: 0, or 1 when it cannot be written.
func printReport(stdout, stderr io.Writer, cmd string, asJSON bool, rep any, text func(io.Writer) error) int {
	var err error
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = text(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "envoy-rls %s: write: %v\n", cmd, err)
		return 1
	}
	return 0
}

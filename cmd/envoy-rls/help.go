package main

import (
	"fmt"
	"io"
	"strings"
)

// printStartError writes why serve could not start, one plain line per
// problem (a rules directory can have several), with no log framing or
// stack: the reader is a person at a terminal or in kubectl logs.
func printStartError(w io.Writer, err error) {
	for _, line := range strings.Split(strings.TrimSpace(err.Error()), "\n") {
		fmt.Fprintf(w, "envoy-rls serve: cannot start: %s\n", line)
	}
}

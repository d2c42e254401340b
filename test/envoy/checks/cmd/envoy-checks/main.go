// Command envoy-checks runs one phase of the shared end-to-end checks
// (package checks) against a running stack, prints one line per check
// ("ok   - name" or "FAIL - name: why") and exits 1 when one failed, 2 on
// bad flags. test/e2e/run.sh runs it against the docker-compose stack:
//
//	go run ./test/envoy/checks/cmd/envoy-checks --phase up \
//	    --envoy http://127.0.0.1:10000 --admin http://127.0.0.1:9901 --rls http://127.0.0.1:8080
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"

	"github.com/envoy-rls/envoy-rls/test/envoy/checks"
)

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

func run(args []string, out io.Writer) int {
	fs := flag.NewFlagSet("envoy-checks", flag.ContinueOnError)
	fs.SetOutput(out)
	var t checks.Target
	fs.StringVar(&t.EnvoyURL, "envoy", "http://127.0.0.1:10000", "Envoy's listener")
	fs.StringVar(&t.AdminURL, "admin", "http://127.0.0.1:9901", "Envoy's admin interface")
	fs.StringVar(&t.RLSURL, "rls", "http://127.0.0.1:8080", "envoy-rls's HTTP address")
	var names []string
	for n := range checks.Phases {
		names = append(names, n)
	}
	slices.Sort(names)
	phase := fs.String("phase", checks.Up.Name, "which checks: "+strings.Join(names, " | "))
	if err := fs.Parse(args); err != nil {
		return 2
	}
	p, ok := checks.Phases[*phase]
	if !ok || fs.NArg() > 0 {
		fmt.Fprintf(out, "envoy-checks: --phase %q is none of %s, or extra arguments %q\n", *phase, strings.Join(names, ", "), fs.Args())
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	failed := p.Run(ctx, t, func(name string, err error) {
		if err != nil {
			fmt.Fprintf(out, "FAIL - %s: %v\n", name, err)
			return
		}
		fmt.Fprintf(out, "ok   - %s\n", name)
	})
	fmt.Fprintf(out, "envoy-checks %s: %d passed, %d failed\n", p.Name, len(p.Checks)-failed, failed)
	if failed > 0 {
		return 1
	}
	return 0
}

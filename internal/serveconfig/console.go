package serveconfig

import (
	"os"

	flag "github.com/spf13/pflag"

	"github.com/envoy-rls/envoy-rls/internal/app"
)

// consoleFlags configure the console on the debug listener (serve).
type consoleFlags struct {
	enabled    bool
	replica    string
	hashValues bool
}

func (c *consoleFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&c.enabled, "console", true, "serve the live console (/console/ and /debug/top on --debug-addr) and feed its top-clients sketch on the request path; false turns both off")
	fs.StringVar(&c.replica, "console-replica", "", "name of this replica on the console (/console on --debug-addr); empty: $POD_NAME, else the host name (a pod's name in Kubernetes)")
	fs.BoolVar(&c.hashValues, "console-hash-values", false, "show descriptor values on the console's top clients (and /debug/top) as keyed SHA-256 hashes, never raw: for values that are personal data (IP addresses, user ids)")
}

func (c *consoleFlags) config() app.ConsoleConfig {
	replica := c.replica
	if replica == "" {
		replica = os.Getenv("POD_NAME")
	}
	if replica == "" {
		replica, _ = os.Hostname()
	}
	return app.ConsoleConfig{Off: !c.enabled, Replica: replica, HashValues: c.hashValues}
}

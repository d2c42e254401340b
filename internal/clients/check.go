package clients

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	flag "github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/internal/flagenv"
	"github.com/envoy-rls/envoy-rls/pkg/rls"
)

// descriptorFlags collects repeated -d k=v,k2=v2 flags.
type descriptorFlags []*ratelimitv3.RateLimitDescriptor

func (d *descriptorFlags) String() string { return "" }

// Type names the value in help, as pflag asks.
func (d *descriptorFlags) Type() string { return "key=value,…" }

func (d *descriptorFlags) Set(s string) error {
	desc := &ratelimitv3.RateLimitDescriptor{}
	entries, err := splitEntries(s)
	if err != nil {
		return err
	}
	for _, kv := range entries {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("entry %q: want key=value", kv)
		}
		desc.Entries = append(desc.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	*d = append(*d, desc)
	return nil
}

// splitEntries splits a -d value at its unescaped commas. A backslash
// makes the next character literal, so values that contain commas (a
// header such as Accept, a list of roles) can be sent: \, is a comma and
// \\ a backslash.
func splitEntries(s string) ([]string, error) {
	var entries []string
	var cur strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			if i+1 == len(s) {
				return nil, fmt.Errorf("%q ends in a lone backslash (want \\\\ for a backslash, \\, for a comma)", s)
			}
			i++
			cur.WriteByte(s[i])
		case ',':
			entries = append(entries, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(c)
		}
	}
	return append(entries, cur.String()), nil
}

// Check is `envoy-rls check`: one decision from a running service, asked
// as Envoy's rate_limit filter asks it, printed per descriptor. Its fields
// are its flags.
type Check struct {
	addr, domain      string
	hits              uint
	checkOnly, refund bool
	timeout           time.Duration
	tls               TLSFiles
	descs             descriptorFlags
	// requireLimit makes a request no limit applies to exit 3.
	requireLimit bool
}

// descriptorUsage is the help of check's and explain's -d.
const descriptorUsage = "descriptor as key=value[,key=value…]; repeat for several descriptors; write a comma or backslash inside a key or value as \\, or \\\\"

// Register defines check's flags on fs.
func (f *Check) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.addr, "addr", "localhost:8081", "gRPC address of envoy-rls")
	fs.StringVar(&f.domain, "domain", "", "rate-limit domain")
	fs.UintVar(&f.hits, "hits", 0, "hits_addend for the request (0 means 1): a request's cost, or a charge's")
	fs.BoolVar(&f.checkOnly, "check-only", false, "send every descriptor with hits_addend 0: check the budget, consume nothing (denied when it is spent or overdrawn)")
	fs.BoolVar(&f.refund, "refund", false, "give --hits back (every descriptor's is_negative_hits), as Envoy's hits_addend.is_negative_hits does")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Second, "deadline for the call")
	f.tls.register(fs, "CA bundle to verify the server; enables TLS", "client certificate for mTLS", "client key for mTLS")
	fs.VarP(&f.descs, "descriptor", "d", descriptorUsage)
	fs.BoolVar(&f.requireLimit, "require-limit", false, "exit 3 when no limit applies to the request (a domain the server does not have, or descriptors no rule matches), for scripts that check Envoy's domain and actions")
}

// Run asks a running service for one decision with the flags cobra parsed
// into fs and prints it per descriptor. Exit codes: 0 OK, 1 OVER_LIMIT, 2
// error, 3 no limit applies (with --require-limit).
func (f *Check) Run(fs *flag.FlagSet, env flagenv.Env, stdout, stderr io.Writer) int {
	if err := flagenv.ApplyTwins(fs, env.Lookup); err != nil {
		fmt.Fprintf(stderr, "envoy-rls check: %v\n", err)
		return 2
	}
	if f.domain == "" || len(f.descs) == 0 {
		fmt.Fprintln(stderr, "envoy-rls check: --domain and at least one -d are required")
		return 2
	}
	if f.checkOnly && f.refund {
		fmt.Fprintln(stderr, "envoy-rls check: --check-only and --refund: a check consumes nothing and gives nothing back (want one of them)")
		return 2
	}
	for _, d := range f.descs {
		switch {
		case f.checkOnly:
			d.HitsAddend = wrapperspb.UInt64(0)
		case f.refund:
			d.HitsAddend, d.IsNegativeHits = wrapperspb.UInt64(uint64(max(f.hits, 1))), true
		}
	}
	creds, err := grpcCredentials(f.tls)
	if err != nil {
		fmt.Fprintf(stderr, "envoy-rls check: %v\n", err)
		return 2
	}
	conn, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		fmt.Fprintf(stderr, "envoy-rls check: dial %s: %v\n", f.addr, err)
		return 2
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	var header metadata.MD
	resp, err := pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &pb.RateLimitRequest{
		Domain: f.domain, Descriptors: f.descs, HitsAddend: uint32(f.hits),
	}, grpc.Header(&header))
	if err != nil {
		fmt.Fprintf(stderr, "envoy-rls check: %v\n", err)
		return 2
	}
	fmt.Fprintf(stdout, "overall: %s\n", resp.GetOverallCode())
	for i, st := range resp.GetStatuses() {
		fmt.Fprintf(stdout, "descriptor %d (%s): %s", i, describe(f.descs[i]), st.GetCode())
		if l := st.GetCurrentLimit(); l != nil {
			fmt.Fprintf(stdout, " limit=%d/%s", l.GetRequestsPerUnit(), l.GetUnit())
			if m := l.GetUnitMultiplier().GetValue(); m > 1 {
				fmt.Fprintf(stdout, "x%d", m)
			}
			if l.GetName() != "" {
				fmt.Fprintf(stdout, " name=%s", l.GetName())
			}
			fmt.Fprintf(stdout, " remaining=%d reset=%s", st.GetLimitRemaining(), st.GetDurationUntilReset().AsDuration())
		}
		fmt.Fprintln(stdout)
	}
	for _, h := range resp.GetResponseHeadersToAdd() {
		fmt.Fprintf(stdout, "header: %s: %s\n", h.GetKey(), h.GetValue())
	}
	if resp.GetOverallCode() == pb.RateLimitResponse_OVER_LIMIT {
		return 1
	}
	if noLimitApplied(resp) {
		// Envoy answers such a request as allowed, so a typo in its
		// domain: turns limiting off without a word; say so. The server
		// names an unknown domain in a response header; otherwise no rule
		// matched, and explain says why.
		if len(header.Get(rls.UnknownDomainHeader)) > 0 {
			fmt.Fprintf(stderr, "envoy-rls check: note: the server has no domain %q: no limit applies (check the domain: of Envoy's rate_limit filter and of the rule files)\n", f.domain)
		} else {
			fmt.Fprintf(stderr, "envoy-rls check: note: no limit applies to this request: no rule of domain %q matches these descriptors, or the rule is unlimited; "+
				"envoy-rls explain --addr <debug address> --domain %s -d … says which\n", f.domain, f.domain)
		}
		if f.requireLimit {
			return 3
		}
	}
	return 0
}

// noLimitApplied reports whether no descriptor of resp had a limit (each
// status is OK with no current limit): the answer to a domain the server
// does not have, or to descriptors no rule matches (or whose rule is
// unlimited).
func noLimitApplied(resp *pb.RateLimitResponse) bool {
	for _, st := range resp.GetStatuses() {
		if st.GetCurrentLimit() != nil || st.GetCode() != pb.RateLimitResponse_OK {
			return false
		}
	}
	return resp.GetOverallCode() == pb.RateLimitResponse_OK
}

func describe(d *ratelimitv3.RateLimitDescriptor) string {
	parts := make([]string, 0, len(d.GetEntries()))
	for _, e := range d.GetEntries() {
		parts = append(parts, e.GetKey()+"="+e.GetValue())
	}
	return strings.Join(parts, ",")
}

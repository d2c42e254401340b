package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/envoy-rls/envoy-rls/pkg/tlsfiles"
)

// descriptorFlags collects repeated -d k=v,k2=v2 flags.
type descriptorFlags []*ratelimitv3.RateLimitDescriptor

func (d *descriptorFlags) String() string { return "" }

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

// check asks a running service for one decision and prints it per
// descriptor. Exit codes: 0 OK, 1 OVER_LIMIT, 2 error.
func check(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("check", stderr)
	addr := fs.String("addr", "localhost:8081", "gRPC address of envoy-rls")
	domain := fs.String("domain", "", "rate-limit domain")
	hits := fs.Uint("hits", 0, "hits_addend for the request (0 means 1)")
	timeout := fs.Duration("timeout", 5*time.Second, "deadline for the call")
	caFile := fs.String("tls-ca", "", "CA bundle to verify the server; enables TLS")
	certFile := fs.String("tls-cert", "", "client certificate for mTLS")
	keyFile := fs.String("tls-key", "", "client key for mTLS")
	var descs descriptorFlags
	fs.Var(&descs, "d", "descriptor as key=value[,key=value…]; repeat for several descriptors; write a comma or backslash inside a key or value as \\, or \\\\")
	if err := parseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "envoy-rls check: %v\n", err)
		return 2
	}
	if *domain == "" || len(descs) == 0 {
		fmt.Fprintln(stderr, "envoy-rls check: --domain and at least one -d are required")
		return 2
	}
	creds, err := clientCredentials(*caFile, *certFile, *keyFile)
	if err != nil {
		fmt.Fprintf(stderr, "envoy-rls check: %v\n", err)
		return 2
	}
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		fmt.Fprintf(stderr, "envoy-rls check: dial %s: %v\n", *addr, err)
		return 2
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	resp, err := pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &pb.RateLimitRequest{
		Domain: *domain, Descriptors: descs, HitsAddend: uint32(*hits),
	})
	if err != nil {
		fmt.Fprintf(stderr, "envoy-rls check: %v\n", err)
		return 2
	}
	fmt.Fprintf(stdout, "overall: %s\n", resp.GetOverallCode())
	for i, st := range resp.GetStatuses() {
		fmt.Fprintf(stdout, "descriptor %d (%s): %s", i, describe(descs[i]), st.GetCode())
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
	return 0
}

func describe(d *ratelimitv3.RateLimitDescriptor) string {
	parts := make([]string, 0, len(d.GetEntries()))
	for _, e := range d.GetEntries() {
		parts = append(parts, e.GetKey()+"="+e.GetValue())
	}
	return strings.Join(parts, ",")
}

func clientCredentials(caFile, certFile, keyFile string) (credentials.TransportCredentials, error) {
	cfg, err := clientTLS(caFile, certFile, keyFile)
	if err != nil || cfg == nil {
		return insecure.NewCredentials(), err
	}
	return credentials.NewTLS(cfg), nil
}

// clientTLS is the client side of the --tls-ca, --tls-cert and --tls-key
// flags of check and override: nil (plain text) without a CA, else a
// configuration trusting it and, with a certificate, presenting it (mTLS).
func clientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" {
		if certFile != "" || keyFile != "" {
			return nil, errors.New("--tls-cert/--tls-key need --tls-ca")
		}
		return nil, nil
	}
	cfg, err := tlsfiles.Config(tlsfiles.Files{CA: caFile, Cert: certFile, Key: keyFile})
	if err != nil {
		return nil, fmt.Errorf("--tls-ca/--tls-cert/--tls-key: %w", err)
	}
	return cfg, nil
}

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/internal/refproc"
	"github.com/envoy-rls/envoy-rls/internal/rlsproc"
	"github.com/envoy-rls/envoy-rls/internal/shipped"
)

// differenceRules hold one rule per difference docs/migrating.md lists
// under "Differences that remain" for requests Envoy sends: an hour's
// windows, so that no edge falls inside the test.
const differenceRules = `domain: diff
descriptors:
  - key: path
    value: /api*v1
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: budget
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: block
    rate_limit: {unit: hour, requests_per_unit: 0}
`

// TestReferenceDifferences asks envoyproxy/ratelimit (the version `make
// bench` pins) and envoy-rls in drop-in mode, on the same rules and the
// reference's environment, the same requests over gRPC, and checks that
// their answers differ exactly where docs/migrating.md says they do, and
// that the page says so:
//   - a wildcard inside a value (/api*v1) matches here, not in the pinned
//     reference, which matches only a trailing *;
//   - a check-only request (hits_addend 0) on a spent budget (2 of 2) is
//     denied here, admitted there; past the limit both deny;
//   - a check-only request on a limit of 0 is denied here, admitted there;
//   - duration_until_reset is whole seconds in both (the reference's
//     clock and ours may be a second apart).
func TestReferenceDifferences(t *testing.T) {
	refBin, err := refproc.Binary()
	if err != nil {
		t.Fatal(err)
	}
	redis := redistest.Standalone(t)
	ref := refproc.Start(t, refBin, writeRuntimeRules(t, differenceRules), redis.Addr)
	dropIn := filepath.Join(t.TempDir(), "ratelimit")
	if err := os.Symlink(binPath, dropIn); err != nil {
		t.Fatal(err)
	}
	rlsRedis := redistest.Standalone(t)
	rls := rlsproc.Start(t, dropIn, nil, refproc.Env(writeRuntimeRules(t, differenceRules), rlsRedis.Addr, 0, 0, 0))
	refC, rlsC := rlsClient(t, ref.GRPCAddr), rlsClient(t, rls.GRPCAddr)
	awayFromHourEdge()

	checkOnly := func(kv string) *ratelimitv3.RateLimitDescriptor {
		d := entries(kv)
		d.HitsAddend = wrapperspb.UInt64(0)
		return d
	}
	ok, over := pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT
	for i, step := range []struct {
		name     string
		desc     *ratelimitv3.RateLimitDescriptor
		ref, rls pb.RateLimitResponse_Code
		// doc is the sentence of docs/migrating.md that names a
		// difference, when the answers differ.
		doc string
	}{
		{"wildcard inside a value", entries("path=/api/orders/v1"), ok, over, "**Wildcards inside a value**"},
		{"first of two", entries("budget=a"), ok, ok, ""},
		{"second of two", entries("budget=a"), ok, ok, ""},
		{"check-only on a spent budget", checkOnly("budget=a"), ok, over, "**A check-only request on a spent budget**"},
		{"third of two", entries("budget=a"), over, over, ""},
		{"check-only past the limit", checkOnly("budget=a"), over, over, ""},
		{"check-only on a limit of 0", checkOnly("block=x"), ok, over, "**A check-only request on a limit of 0**"},
		{"a request on a limit of 0", entries("block=x"), over, over, ""},
	} {
		refResp, rlsResp := ask(t, refC, step.desc), ask(t, rlsC, step.desc)
		if got := [2]pb.RateLimitResponse_Code{refResp.GetOverallCode(), rlsResp.GetOverallCode()}; got != [2]pb.RateLimitResponse_Code{step.ref, step.rls} {
			t.Errorf("step %d (%s): reference %s, envoy-rls %s; want %s and %s", i, step.name, got[0], got[1], step.ref, step.rls)
		}
		for who, resp := range map[string]*pb.RateLimitResponse{"reference": refResp, "envoy-rls": rlsResp} {
			for _, st := range resp.GetStatuses() {
				if d := st.GetDurationUntilReset(); d != nil && d.GetNanos() != 0 {
					t.Errorf("step %d (%s): %s's duration_until_reset %v is not whole seconds", i, step.name, who, d.AsDuration())
				}
			}
		}
		if step.ref != step.rls && !migratingSays(t, step.doc) {
			t.Errorf("step %d (%s): the answers differ, and docs/migrating.md does not list %q", i, step.name, step.doc)
		}
	}
}

// entries is a descriptor of comma-separated key=value pairs.
func entries(kvs string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for _, kv := range strings.Split(kvs, ",") {
		k, v, _ := strings.Cut(kv, "=")
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

func rlsClient(t *testing.T, addr string) pb.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewRateLimitServiceClient(conn)
}

func ask(t *testing.T, c pb.RateLimitServiceClient, d *ratelimitv3.RateLimitDescriptor) *pb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "diff", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// migratingSays reports whether docs/migrating.md's "Differences that
// remain" holds s.
func migratingSays(t *testing.T, s string) bool {
	t.Helper()
	root, err := shipped.Root()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", "migrating.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "## Differences that remain")
	end := strings.Index(doc[start+1:], "\n## ")
	return start >= 0 && end >= 0 && strings.Contains(doc[start:start+1+end], s)
}

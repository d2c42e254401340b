package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// costlyLogin is issue 10's hostile request on the shipped example rules:
// 64 descriptors on the sliding_log login rule, for 64 client addresses,
// each overriding the limit to 10000 per YEAR with hits_addend 10000.
// Admitted, it would add 640,000 sorted-set members under one-year TTLs in
// one script call of over a second.
func costlyLogin(victim string) *pb.RateLimitRequest {
	req := &pb.RateLimitRequest{Domain: "edge"}
	for i := range 64 {
		d := desc("generic_key", "login", "remote_address", fmt.Sprintf("%s-%d", victim, i))
		d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 10_000, Unit: typev3.RateLimitUnit_YEAR}
		d.HitsAddend = wrapperspb.UInt64(10_000)
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

// TestRequestCostBounded sends the costly request over gRPC and /json while
// ordinary traffic runs, on real Redis with the shipped rules. It is
// refused before anything is written: Redis's memory grows by under 1 MB,
// no script carrying it reaches the slow log (5 ms threshold), and the
// ordinary traffic sees no error.
func TestRequestCostBounded(t *testing.T) {
	files := map[string]string{}
	for _, name := range []string{"edge.yaml", "internal.yaml"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "examples", "config", name))
		if err != nil {
			t.Fatal(err)
		}
		files[name] = string(b)
	}
	s, r := startOnRedis(t, files)
	ctx := context.Background()
	rc := r.Client(t)
	if err := rc.ConfigSet(ctx, "slowlog-log-slower-than", "5000").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.SlowLogReset(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	before := usedMemory(t, rc)

	// Ordinary traffic: bounded in count, distinct clients so that none
	// is denied.
	const workers, each = 4, 100
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				ip := fmt.Sprintf("198.51.%d.%d", w, i)
				_, err := s.rls().ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{desc("generic_key", "login", "remote_address", ip)}})
				if err != nil {
					errs <- err
				}
			}
		}()
	}

	const victim = "costly-victim"
	_, err := s.rls().ShouldRateLimit(ctx, costlyLogin(victim))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "cost 640000 above the limit 1000") {
		t.Errorf("costly request over gRPC: %v, want InvalidArgument naming its cost", err)
	}
	code, body := s.post("/json", costlyJSON(victim))
	if code != http.StatusBadRequest || !strings.Contains(body, "cost 640000") {
		t.Errorf("costly request over /json: %d %s, want 400 naming its cost", code, body)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("ordinary request failed meanwhile: %v", err)
	}

	if grown := usedMemory(t, rc) - before; grown >= 1<<20 {
		t.Errorf("Redis used_memory grew by %d bytes, want under 1 MB", grown)
	}
	slow, err := rc.SlowLogGet(ctx, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range slow {
		if strings.Contains(strings.Join(e.Args, " "), victim) {
			t.Errorf("the costly request reached Redis and ran %v: %v", e.Duration, e.Args)
		}
	}
	keys, err := rc.Keys(ctx, "*"+victim+"*").Result()
	if err != nil || len(keys) != 0 {
		t.Errorf("the costly request wrote keys %v (%v)", keys, err)
	}

	// The victims' own limit is untouched: 5 logins per minute.
	resp := s.ask("edge", desc("generic_key", "login", "remote_address", victim+"-0"))
	if resp.GetOverallCode() != pb.RateLimitResponse_OK || resp.Statuses[0].GetLimitRemaining() != 4 {
		t.Errorf("victim after the costly request: %v", resp)
	}
}

// costlyJSON is costlyLogin as a /json body.
func costlyJSON(victim string) string {
	descs := make([]string, 64)
	for i := range descs {
		descs[i] = fmt.Sprintf(`{"entries":[{"key":"generic_key","value":"login"},{"key":"remote_address","value":"%s-%d"}],`+
			`"limit":{"requests_per_unit":10000,"unit":"YEAR"},"hits_addend":10000}`, victim, i)
	}
	return `{"domain":"edge","descriptors":[` + strings.Join(descs, ",") + `]}`
}

// usedMemory reads INFO memory's used_memory.
func usedMemory(t *testing.T, rc *redis.Client) int64 {
	t.Helper()
	info, err := rc.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("used_memory %q: %v", v, err)
			}
			return n
		}
	}
	t.Fatalf("no used_memory in INFO memory:\n%s", info)
	return 0
}

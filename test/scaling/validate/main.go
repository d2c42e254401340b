// Command validate runs the real system at small scale for docs/scaling.md:
// a 3-master Redis Cluster (with replicas, internal/testkit/redistest), several
// envoy-rls processes on it, and a bounded closed-loop gRPC load whose keys
// follow the model's Zipf shape, spread evenly over the replicas. It prints
// per master the script calls, the script work (GET calls: one per
// decision, grant or return of a token_bucket counter) and CPU, and the
// replicas' lease counters, for comparison with
// `go run ./test/scaling -replicas 4 -shards 3 -rate <measured> …`.
//
//	go build -o bin/envoy-rls ./cmd/envoy-rls
//	go run ./test/scaling/validate -bin bin/envoy-rls -duration 20s
//
// Everything runs on loopback and stops within -duration plus start-up; it
// must not touch any Redis or process it did not start. Figures are
// targets to compare, never assertions.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"
	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

type config struct {
	bin         string
	replicas    int
	concurrency int
	duration    time.Duration
	maxRequests int64
	keys        int
	zipf        float64
	seed        uint64
	leaseArgs   string
}

func run(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	var c config
	var keys float64
	fs.StringVar(&c.bin, "bin", "bin/envoy-rls", "envoy-rls binary")
	fs.IntVar(&c.replicas, "replicas", 4, "envoy-rls processes")
	fs.IntVar(&c.concurrency, "concurrency", 32, "workers, each with one call in flight, spread evenly over the replicas")
	fs.DurationVar(&c.duration, "duration", 20*time.Second, "measured load, at most")
	fs.Int64Var(&c.maxRequests, "max-requests", 1_000_000, "calls, at most")
	fs.Float64Var(&keys, "keys", 1e7, "Zipf ranks")
	fs.Float64Var(&c.zipf, "zipf", 1.1, "Zipf exponent (> 1)")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the key draws")
	fs.StringVar(&c.leaseArgs, "rls-args", "", "extra envoy-rls flags, e.g. \"--lease-ttl 0\"")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("validate: %w", err)
	}
	c.keys = int(keys)
	if c.replicas < 1 || c.concurrency < c.replicas || c.duration <= 0 || c.duration > 5*time.Minute ||
		c.maxRequests < 1 || c.keys < 1 || !(c.zipf > 1) {
		return fmt.Errorf("validate: want -replicas ≥ 1, -concurrency ≥ -replicas, 0 < -duration ≤ 5m, -max-requests ≥ 1, -keys ≥ 1, -zipf > 1")
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.duration+3*time.Minute)
	defer cancel()

	cl, err := redistest.StartCluster()
	if err != nil {
		return fmt.Errorf("validate: cluster: %w", err)
	}
	defer cl.Close()
	masters, err := mastersBySlot(ctx, cl.Addrs)
	if err != nil {
		return err
	}

	dir, err := os.MkdirTemp("", "envoy-rls-validate-")
	if err != nil {
		return fmt.Errorf("validate: %w", err)
	}
	defer os.RemoveAll(dir)
	rules := "domain: perf\ndescriptors:\n  - key: key\n    rate_limit:\n      unit: second\n      requests_per_unit: 1000000\n      algorithm: token_bucket\n      lease: auto\n"
	if err := os.WriteFile(filepath.Join(dir, "perf.yaml"), []byte(rules), 0o600); err != nil {
		return fmt.Errorf("validate: %w", err)
	}
	var procs []*proc
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	for i := range c.replicas {
		p, err := start(ctx, c, dir, "redis+cluster://"+strings.Join(cl.Addrs, ","), i)
		if err != nil {
			return err
		}
		procs = append(procs, p)
	}

	before, err := snapshot(ctx, masters)
	if err != nil {
		return err
	}
	leaseBefore := leaseTotals(procs)
	n, elapsed, errs, err := load(ctx, c, procs)
	if err != nil {
		return err
	}
	after, err := snapshot(ctx, masters)
	if err != nil {
		return err
	}
	leaseAfter := leaseTotals(procs)

	report(w, c, masters, before, after, leaseBefore, leaseAfter, n, elapsed, errs)
	return nil
}

// report writes what the run measured, per shard and for the leases, and
// the model command that predicts it.
func report(w io.Writer, c config, masters []master, before, after []stats, leaseBefore, leaseAfter map[string]float64, n int64, elapsed time.Duration, errs int64) {
	rate := float64(n) / elapsed.Seconds()
	fmt.Fprintf(w, "## Measured: %d envoy-rls replicas, %d-master cluster, Zipf s=%g over %d keys\n\n", c.replicas, len(masters), c.zipf, c.keys)
	fmt.Fprintf(w, "%d decisions in %.1fs = %.0f decisions/s, %d RPC errors; envoy-rls args %q.\n\n", n, elapsed.Seconds(), rate, errs, c.leaseArgs)
	fmt.Fprintln(w, "| shard (slots) | Redis decisions/s (GET) | EVALSHA/s | decisions per EVALSHA | commands/s | Redis CPU µs/s | Redis CPU µs per Redis decision |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for i, m := range masters {
		d := after[i].sub(before[i])
		s := elapsed.Seconds()
		fmt.Fprintf(w, "| %d (%d-%d) | %.0f | %.0f | %.2f | %.0f | %.0f | %.1f |\n", i, m.first, m.last,
			float64(d.calls["get"])/s, float64(d.calls["evalsha"])/s, ratio(d.calls["get"], d.calls["evalsha"]),
			float64(d.commands)/s, d.cpu.Seconds()*1e6/s, d.cpu.Seconds()*1e6/float64(max(1, d.calls["get"])))
	}
	fmt.Fprintln(w)
	for _, name := range []string{"granted", "local_decisions", "hits_returned", "hits_expired"} {
		fmt.Fprintf(w, "envoy_rls_lease_%s_total: %.0f/s\n", name, (leaseAfter[name]-leaseBefore[name])/elapsed.Seconds())
	}
	fmt.Fprintf(w, "\nModel: go run ./test/scaling -replicas %d -shards %d -rate %.0f -keys %d -zipf %g -limit 1e6 %s\n",
		c.replicas, len(masters), rate, c.keys, c.zipf, modelLeaseArgs(c.leaseArgs))
}

func modelLeaseArgs(rlsArgs string) string {
	f := strings.Fields(rlsArgs)
	var out []string
	for i := 0; i+1 < len(f); i++ {
		if strings.HasPrefix(f[i], "--lease-") {
			out = append(out, f[i][1:], f[i+1])
		}
	}
	return strings.Join(out, " ")
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

type master struct {
	addr        string
	first, last int
	client      *redis.Client
}

// mastersBySlot returns the cluster's masters ordered by their first slot,
// the order the model numbers shards in.
func mastersBySlot(ctx context.Context, seeds []string) ([]master, error) {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: seeds})
	defer cc.Close()
	shards, err := cc.ClusterShards(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("validate: cluster shards: %w", err)
	}
	var ms []master
	for _, sh := range shards {
		if len(sh.Slots) != 1 {
			// redis-cli --cluster create gives each master one range;
			// anything else is not the layout the model assumes.
			return nil, fmt.Errorf("validate: a shard owns %d slot ranges (want 1)", len(sh.Slots))
		}
		i := slices.IndexFunc(sh.Nodes, func(n redis.Node) bool { return n.Role == "master" })
		if i < 0 {
			return nil, fmt.Errorf("validate: slots %d-%d: no master", sh.Slots[0].Start, sh.Slots[0].End)
		}
		n := sh.Nodes[i]
		ms = append(ms, master{addr: net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10)), first: int(sh.Slots[0].Start), last: int(sh.Slots[0].End)})
	}
	slices.SortFunc(ms, func(a, b master) int { return a.first - b.first })
	for i := range ms {
		ms[i].client = redis.NewClient(&redis.Options{Addr: ms[i].addr})
	}
	return ms, nil
}

type stats struct {
	cpu      time.Duration
	commands int64
	calls    map[string]int64
}

func (s stats) sub(b stats) stats {
	d := stats{cpu: s.cpu - b.cpu, commands: s.commands - b.commands - 1, calls: map[string]int64{}}
	for k, v := range s.calls {
		d.calls[k] = v - b.calls[k]
	}
	return d
}

func snapshot(ctx context.Context, ms []master) ([]stats, error) {
	out := make([]stats, len(ms))
	for i, m := range ms {
		text, err := m.client.Info(ctx, "stats", "cpu", "commandstats").Result()
		if err != nil {
			return nil, fmt.Errorf("validate: info %s: %w", m.addr, err)
		}
		s := stats{calls: map[string]int64{}}
		var user, sys float64
		sc := bufio.NewScanner(strings.NewReader(text))
		for sc.Scan() {
			k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
			if !ok {
				continue
			}
			switch k {
			case "used_cpu_user":
				user, _ = strconv.ParseFloat(v, 64)
			case "used_cpu_sys":
				sys, _ = strconv.ParseFloat(v, 64)
			case "total_commands_processed":
				s.commands, _ = strconv.ParseInt(v, 10, 64)
			default:
				if name, ok := strings.CutPrefix(k, "cmdstat_"); ok {
					for f := range strings.SplitSeq(v, ",") {
						if n, ok := strings.CutPrefix(f, "calls="); ok {
							s.calls[name], _ = strconv.ParseInt(n, 10, 64)
						}
					}
				}
			}
		}
		s.cpu = time.Duration((user + sys) * float64(time.Second))
		out[i] = s
	}
	return out, nil
}

type proc struct {
	cmd        *exec.Cmd
	grpc, http string
}

func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

func freeAddr() (string, error) {
	port, err := childproc.FreePort()
	if err != nil {
		return "", fmt.Errorf("validate: %w", err)
	}
	return "127.0.0.1:" + strconv.Itoa(port), nil
}

func start(ctx context.Context, c config, dir, redisURL string, i int) (*proc, error) {
	g, err := freeAddr()
	if err != nil {
		return nil, err
	}
	h, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := []string{"serve", "--config-dir", dir, "--grpc-addr", g, "--http-addr", h, "--debug-addr=", "--redis-url", redisURL, "--log-level", "warn"}
	args = append(args, strings.Fields(c.leaseArgs)...)
	cmd := exec.Command(c.bin, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("validate: start replica %d: %w", i, err)
	}
	p := &proc{cmd: cmd, grpc: g, http: h}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + h + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			p.stop()
			return nil, fmt.Errorf("validate: replica %d not ready on %s within 30s", i, h)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// leaseTotals sums the lease counters of every replica's /metrics.
func leaseTotals(ps []*proc) map[string]float64 {
	out := map[string]float64{}
	for _, p := range ps {
		resp, err := http.Get("http://" + p.http + "/metrics")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			name, v, ok := strings.Cut(sc.Text(), " ")
			if !ok || !strings.HasPrefix(name, "envoy_rls_lease_") {
				continue
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				continue
			}
			out[strings.TrimSuffix(strings.TrimPrefix(name, "envoy_rls_lease_"), "_total")] += f
		}
		resp.Body.Close()
	}
	return out
}

// load runs the closed loop: worker i calls replica i mod replicas, with
// keys drawn from its own seeded Zipf sampler, until duration or
// maxRequests.
func load(ctx context.Context, c config, ps []*proc) (n int64, elapsed time.Duration, errs int64, err error) {
	conns := make([]*grpc.ClientConn, len(ps))
	for i, p := range ps {
		cc, err := grpc.NewClient("passthrough:///"+p.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return 0, 0, 0, fmt.Errorf("validate: dial %s: %w", p.grpc, err)
		}
		defer cc.Close()
		conns[i] = cc
	}
	var done, failed, issued atomic.Int64
	lctx, cancel := context.WithTimeout(ctx, c.duration)
	defer cancel()
	t0 := time.Now()
	var wg sync.WaitGroup
	for wi := range c.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := rlsv3.NewRateLimitServiceClient(conns[wi%len(conns)])
			r := rand.New(rand.NewPCG(c.seed, uint64(wi)))
			z := rand.NewZipf(r, c.zipf, 1, uint64(c.keys-1))
			e := &rlv3.RateLimitDescriptor_Entry{Key: "key"}
			req := &rlsv3.RateLimitRequest{Domain: "perf", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{e}}}}
			buf := make([]byte, 0, 32)
			for lctx.Err() == nil && issued.Add(1) <= c.maxRequests {
				buf = strconv.AppendUint(append(buf[:0], "user-"...), z.Uint64()+1, 10)
				e.Value = string(buf)
				if _, err := client.ShouldRateLimit(lctx, req); err != nil {
					if lctx.Err() == nil {
						failed.Add(1)
					}
					continue
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	return done.Load(), time.Since(t0), failed.Load(), nil
}

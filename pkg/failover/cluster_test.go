package failover_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/failover"
	"github.com/envoy-rls/envoy-rls/pkg/redisalgo"
)

// shardLoad is one call of TestClusterShardFailure's load: when it ended
// (since the start), whether its key lived on the failed master, and its
// error.
type shardLoad struct {
	at     time.Duration
	victim bool
	err    error
}

// TestClusterShardFailure (issue 10, point 7): a 3-master cluster with
// replicas under a bounded load spread over many keys in all slots; one
// master dies (killed: connections refused) or hangs (SIGSTOP: connections
// open, no replies) and its replica is promoted. Each call is classified
// by whether its key's slot belonged to that master.
//   - Calls for the healthy masters' keys almost never fail (≤ 1%): their
//     shards' breakers stay closed, their pipelines do not wait behind the
//     failed master's, and the failed master's errors do not count against
//     them.
//   - The failed master's breaker opens (its keys get the failure mode
//     without waiting).
//   - The failed master's keys succeed again soon after the promotion,
//     without waiting for go-redis's periodic slot map reload (a minute).
//     The times from the promotion to the first and to the last failure
//     are logged; the test bounds them only generously (the issue asks
//     for 1 s; 5 s still tells a working refresh from a missing one).
func TestClusterShardFailure(t *testing.T) {
	// ratio: a failure ratio low enough that the failed master's third of
	// the traffic would open one breaker for the whole cluster, as the
	// issue saw; otherwise the service's defaults (internal/serveconfig).
	ratio := failover.BreakerOptions{Failures: 100, FailureRatio: 0.2}
	// noProbe: with a cool-down of an hour, no half-open probe can be what
	// finds the promoted replica, only the slot map refresh can. The ratio
	// is off: a few slow first calls on a starved machine could otherwise
	// trip the promoted master's new breaker (no history yet) for the rest
	// of the test.
	noProbe := failover.BreakerOptions{Failures: 100, Cooldown: time.Hour}
	for _, tc := range []struct {
		name    string
		fault   func(*redistest.Server, testing.TB)
		breaker failover.BreakerOptions
	}{
		{"killed", (*redistest.Server).Kill, ratio},
		{"hung", (*redistest.Server).Pause, ratio},
		{"killed, no probe", (*redistest.Server).Kill, noProbe},
	} {
		t.Run(tc.name, func(t *testing.T) { shardFailure(t, tc.fault, tc.breaker) })
	}
}

func shardFailure(t *testing.T, fault func(*redistest.Server, testing.TB), breaker failover.BreakerOptions) {
	const (
		keys    = 10_000
		workers = 4
		// pace between one worker's calls: about 2 000 calls/s in all
		// when calls are fast, fewer on a slow machine; counts matter,
		// not the rate.
		pace     = 2 * time.Millisecond
		maxCalls = 100_000 // per worker, a bound only
		timeout  = 200 * time.Millisecond
		// after is how long the load runs on after the promotion.
		after = 3 * time.Second
		// recoverWithin bounds the failed master's last failure after the
		// promotion; see above.
		recoverWithin = 5 * time.Second
	)
	cl := redistest.Cluster(t)
	reg := prometheus.NewRegistry()
	_, fb := redisFailover(t, "redis+cluster://"+strings.Join(cl.Addrs, ","), timeout, failover.Options{
		Breaker:    breaker,
		Registerer: reg,
	})

	checks := make([]algo.Check, keys)
	for i := range checks {
		checks[i] = algo.Check{Domain: t.Name(), Entries: []algo.Entry{{Key: "user", Value: fmt.Sprint(i)}}, HashTag: -1,
			Policy: algo.Policy{Algorithm: algo.TokenBucket, Limit: 1_000_000, Period: algo.Hour}, Hits: 1}
	}
	victim := cl.Masters(t)[1]
	replica := cl.ReplicaOf(t, victim)
	onVictim := victimKeys(t, cl, victim.Addr, checks)
	t.Logf("%d of %d keys on the master that fails (%s)", countTrue(onVictim), keys, victim.Addr)

	var (
		mu       sync.Mutex
		outcomes []shardLoad
		started  = time.Now()
		stop     = make(chan struct{})
		calls    atomic.Int64
		wg       sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			var mine []shardLoad
			defer func() { mu.Lock(); outcomes = append(outcomes, mine...); mu.Unlock() }()
			for range maxCalls {
				select {
				case <-stop:
					return
				case <-time.After(pace):
				}
				k := rng.IntN(keys)
				// A liveness bound: a call that hangs fails the test here
				// instead of hanging it.
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := fb.Apply(ctx, time.Now(), []algo.Check{checks[k]})
				cancel()
				mine = append(mine, shardLoad{at: time.Since(started), victim: onVictim[k], err: err})
				calls.Add(1)
			}
		})
	}
	waitFor(t, "the load is running", func() bool { return calls.Load() >= 500 })

	faultAt := time.Since(started)
	fault(victim, t)
	t.Cleanup(victim.Close) // a paused process too
	promotedAt := waitPromoted(t, replica).Sub(started)
	time.Sleep(after)
	close(stop)
	wg.Wait()

	slices.SortFunc(outcomes, func(a, b shardLoad) int { return int(a.at - b.at) })
	var healthy, healthyFailed, victimCalls, victimFailed int
	var firstOK, lastFailed time.Duration = -1, -1
	// Samples of the errors that matter, to tell why when the test fails.
	var healthyErrs, lateErrs []string
	sample := func(errs []string, err error) []string {
		if msg := err.Error(); len(errs) < 5 && !slices.Contains(errs, msg) {
			errs = append(errs, msg)
		}
		return errs
	}
	for _, c := range outcomes {
		if !c.victim {
			healthy++
			if c.err != nil {
				healthyFailed++
				healthyErrs = sample(healthyErrs, c.err)
			}
			continue
		}
		victimCalls++
		if c.err != nil {
			victimFailed++
			if c.at > promotedAt {
				lastFailed = c.at
				lateErrs = sample(lateErrs, c.err)
			}
		} else if c.at > promotedAt && firstOK < 0 {
			firstOK = c.at
		}
	}
	t.Logf("fault at %v, promotion seen at %v (%v later)", faultAt, promotedAt, promotedAt-faultAt)
	t.Logf("healthy masters: %d calls, %d failed (%.2f%%)", healthy, healthyFailed, 100*float64(healthyFailed)/float64(max(healthy, 1)))
	t.Logf("failed master: %d calls, %d failed; after the promotion: first success %v later, last failure %v later",
		victimCalls, victimFailed, since(firstOK, promotedAt), since(lastFailed, promotedAt))
	t.Logf("errors by kind: %v", errorsByKind(t, reg))
	t.Logf("healthy masters' errors: %q; failed master's after the promotion: %q", healthyErrs, lateErrs)

	if healthy == 0 || float64(healthyFailed) > 0.01*float64(healthy) {
		t.Errorf("%d of %d calls for the healthy masters failed, want ≤ 1%%", healthyFailed, healthy)
	}
	if firstOK < 0 {
		t.Fatalf("the failed master's keys never succeeded in the %v after the promotion", after)
	}
	if lastFailed > promotedAt+recoverWithin {
		t.Errorf("the failed master's keys still failed %v after the promotion, want recovery within %v", lastFailed-promotedAt, recoverWithin)
	}
	if victimFailed == 0 {
		t.Error("no call for the failed master failed: did the fault happen?")
	}
	if errorsByKind(t, reg)["circuit_open"] == 0 {
		t.Error("the failed master's breaker never opened")
	}
}

func since(at, from time.Duration) string {
	if at < 0 {
		return "never"
	}
	return (at - from).String()
}

func countTrue(v []bool) (n int) {
	for _, b := range v {
		if b {
			n++
		}
	}
	return n
}

// victimKeys reports, per check, whether master serves its key's slot,
// from one CLUSTER SHARDS and one pipeline of CLUSTER KEYSLOT.
func victimKeys(t *testing.T, cl *redistest.ClusterSet, master string, checks []algo.Check) []bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := cl.Nodes[0].Client(t)
	shards, err := c.ClusterShards(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	var ranges []redis.SlotRange
	for _, sh := range shards {
		for _, n := range sh.Nodes {
			if n.Role == "master" && fmt.Sprintf("%s:%d", n.IP, n.Port) == master {
				ranges = append(ranges, sh.Slots...)
			}
		}
	}
	if len(ranges) == 0 {
		t.Fatalf("CLUSTER SHARDS names no slots for master %s: %+v", master, shards)
	}
	pipe := c.Pipeline()
	cmds := make([]*redis.IntCmd, len(checks))
	for i, ch := range checks {
		cmds[i] = pipe.ClusterKeySlot(ctx, string(redisalgo.AppendKey(nil, ch, redisalgo.DefaultCounterHashes)))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	out := make([]bool, len(checks))
	for i, cmd := range cmds {
		slot := cmd.Val()
		out[i] = slices.ContainsFunc(ranges, func(r redis.SlotRange) bool { return slot >= r.Start && slot <= r.End })
	}
	return out
}

// waitPromoted polls replica until it reports itself master and returns
// when it first did.
func waitPromoted(t *testing.T, replica *redistest.Server) time.Time {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: replica.Addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer c.Close()
	var at time.Time
	waitFor(t, "the replica is promoted", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		role, err := c.Do(ctx, "ROLE").Slice()
		if err == nil && len(role) > 0 && role[0] == "master" {
			at = time.Now()
			return true
		}
		return false
	})
	return at
}

// waitFor polls cond every 10 ms for at most 60 s (a liveness bound: the
// cluster elects a new master within a few seconds).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 60s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

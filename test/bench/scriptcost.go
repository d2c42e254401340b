package main

// --script-cost: what a script call costs Redis beside plain commands, at a
// paced 1000 calls/s (where a replica spends its life, and where Redis is
// idle between calls) and in a closed loop of 8 callers. It explains issue
// 19's finding that an EVALSHA costs Redis several times more in the
// comparison than alone under redis-benchmark: at a low rate every call
// arrives at an idle Redis, and a script's code path, much longer than a
// plain command's, costs several times more then (BENCHMARKS.md).

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/pkg/redisalgo"
)

// scriptCostOp is one kind of call: plain commands or a script.
type scriptCostOp struct {
	name string
	do   func(ctx context.Context, c *redis.Client, key string) error
	// setup, when set, runs before the op is measured (unmeasured): it
	// fills what the op's steady state needs.
	setup func(ctx context.Context, c *redis.Client) error
}

// scriptCostOps returns the calls measured; envoy-rls's scripts are the
// backend's own, as it loads them (redisalgo.LoadedScripts).
func scriptCostOps() []scriptCostOp {
	tiny := redis.NewScript(`return 1`)
	minimal := redis.NewScript(`local c = redis.call('INCRBY', KEYS[1], 1)
if c == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return c`)
	applySrc, leanSrc := redisalgo.LoadedScripts()
	apply, lean := redis.NewScript(applySrc), redis.NewScript(leanSrc)
	// One fixed window of 10⁹ per second at the server's TIME, one hit:
	// the common call's four integers and its field in its window's hash.
	args := []any{1, 1, 1_000_000_000, 1_000_000, "key:user-1"}
	script := func(s *redis.Script, args ...any) func(context.Context, *redis.Client, string) error {
		return func(ctx context.Context, c *redis.Client, key string) error {
			return s.Run(ctx, c, []string{key}, args...).Err()
		}
	}
	return []scriptCostOp{
		{name: "PING (a round trip, no work)", do: func(ctx context.Context, c *redis.Client, _ string) error { return c.Ping(ctx).Err() }},
		{name: "INCRBY + EXPIRE (envoyproxy/ratelimit's pipeline)", do: incrExpire("expire")},
		{name: "INCRBY + PEXPIRE (envoy-rls's plain call before issue 33, layout r2)", do: incrExpire("pexpire")},
		{name: "EVALSHA `return 1`", do: script(tiny)},
		{name: "EVALSHA INCRBY + first-hit PEXPIRE", do: script(minimal, 1000)},
		{name: "EVALSHA lean.lua, one fixed window", do: script(lean, args...)},
		{name: "EVALSHA apply.lua, one fixed window", do: script(apply, args...)},
		{name: "INCRBY alone (an expiry set once per key, elsewhere)", do: func(ctx context.Context, c *redis.Client, key string) error {
			return c.IncrBy(ctx, key, 1).Err()
		}},
		hashIncr("HINCRBY into ~100-field listpack hashes (envoy-rls's plain call)", 1000),
		hashIncr("HINCRBY into ~1600-field hashtable hashes", 64),
		hashWindow("envoy-rls's plain call whole: HINCRBY into per-second hashes, PEXPIRE … NX once per hash and second (64 hashes)", 64),
	}
}

// hashWindow is the plain call (pkg/redisalgo/plain.go) whole, for one
// replica, as the driver can send it without the service's packages: a
// per-second window's counters in buckets hashes named by the second, each
// call one HINCRBY, and the first call of a second to a hash also its
// PEXPIRE … NX in the same pipeline. Its commands per call show what the
// expiry adds to one command per decision.
func hashWindow(name string, buckets int) scriptCostOp {
	var (
		mu   sync.Mutex
		sent = make([]int64, buckets) // the second each bucket's expiry was sent for
	)
	return scriptCostOp{
		name: name,
		do: func(ctx context.Context, c *redis.Client, key string) error {
			h := fnv.New32a()
			h.Write([]byte(key))
			b := int(h.Sum32() % uint32(buckets))
			sec := time.Now().Unix()
			hash := "w{" + strconv.Itoa(b) + "}" + strconv.FormatInt(sec, 36)
			mu.Lock()
			first := sent[b] != sec
			sent[b] = sec
			mu.Unlock()
			if !first {
				return c.HIncrBy(ctx, hash, key, 1).Err()
			}
			p := c.Pipeline()
			p.HIncrBy(ctx, hash, key, 1)
			p.Do(ctx, "pexpire", hash, 2000, "nx")
			_, err := p.Exec(ctx)
			return err
		},
	}
}

// hashIncr is the plain call's command: HINCRBY of the key's field
// in one of buckets hashes, the expiry set once per hash and window
// elsewhere (not measured: a few per second per replica). Its setup fills
// every hash with its share of the 100 000 keys, so each call meets a hash
// of the size it would in a window where the keys are live.
func hashIncr(name string, buckets int) scriptCostOp {
	hash := func(key string) string {
		h := fnv.New32a()
		h.Write([]byte(key))
		return "h{" + strconv.Itoa(int(h.Sum32()%uint32(buckets))) + "}"
	}
	return scriptCostOp{
		name: name,
		do: func(ctx context.Context, c *redis.Client, key string) error {
			return c.HIncrBy(ctx, hash(key), key, 1).Err()
		},
		setup: func(ctx context.Context, c *redis.Client) error {
			for from := 0; from < scriptCostKeys; from += 1000 {
				p := c.Pipeline()
				for i := from; i < from+1000; i++ {
					p.HIncrBy(ctx, hash(scriptCostKey(i)), scriptCostKey(i), 1)
				}
				if _, err := p.Exec(ctx); err != nil {
					return fmt.Errorf("filling the hashes: %w", err)
				}
			}
			return nil
		},
	}
}

// scriptCostKeys is how many keys the calls spread over.
const scriptCostKeys = 100_000

// scriptCostKey is the i-th call's key.
func scriptCostKey(i int) string { return "{u" + strconv.Itoa(i%scriptCostKeys) + "}" }

// incrExpire is a pipeline of INCRBY key 1 and expire (EXPIRE key 1 or
// PEXPIRE key 1000): envoyproxy/ratelimit's call and envoy-rls's plain
// call.
func incrExpire(expire string) func(context.Context, *redis.Client, string) error {
	ttl := 1
	if expire == "pexpire" {
		ttl = 1000
	}
	return func(ctx context.Context, c *redis.Client, key string) error {
		p := c.Pipeline()
		p.IncrBy(ctx, key, 1)
		p.Do(ctx, expire, key, ttl)
		_, err := p.Exec(ctx)
		return err
	}
}

// scriptCostRow is one op measured at one load.
type scriptCostRow struct {
	op, load string
	calls    int
	redisCPU float64            // µs per call
	exec     map[string]float64 // commandstats µs per call of the op's commands
	per      map[string]float64 // the op's commands per call
}

// runScriptCost measures every op at 1000 calls/s and in a closed loop of
// 8 callers on a redis-server of its own, emptied before each op, and
// writes the table: 3000 paced
// calls and 40 000 closed-loop calls per op, fewer when --max-requests is
// lower (a thirtieth of it paced, all of it closed).
func runScriptCost(ctx context.Context, opts options, stdout, stderr io.Writer) error {
	b, err := newBench(opts, stderr)
	if err != nil {
		return err
	}
	defer b.close()
	bin, err := findRedisServer(opts.redisServer)
	if err != nil {
		return err
	}
	rd, err := startRedis(ctx, bin, b.tmp)
	if err != nil {
		return err
	}
	b.trackRedis(rd)
	c := redis.NewClient(&redis.Options{Addr: rd.addr, PoolSize: 8})
	defer c.Close()
	ops := scriptCostOps()
	var rows []scriptCostRow
	for _, load := range []struct {
		name  string
		rate  int
		calls int
	}{{"1000/s", 1000, int(min(3000, max(opts.maxRequests/30, 1)))}, {"closed, 8 callers", 0, int(min(40000, max(opts.maxRequests, 8)))}} {
		for _, op := range ops {
			row, err := scriptCostRun(ctx, c, rd, op, load.rate, load.calls)
			if err != nil {
				return fmt.Errorf("bench: script cost: %s at %s: %w", op.name, load.name, err)
			}
			row.load = load.name
			b.logf("script cost: %s at %s: %.1f µs Redis CPU per call", op.name, load.name, row.redisCPU)
			rows = append(rows, row)
		}
	}
	writeScriptCost(stdout, rows)
	return nil
}

// scriptCostRun runs calls of op, paced to rate (0: a closed loop of 8
// callers), over 100 000 keys, and reads Redis's CPU and commandstats
// around them.
func scriptCostRun(ctx context.Context, c *redis.Client, rd *redisServer, op scriptCostOp, rate, calls int) (scriptCostRow, error) {
	// Each op on an empty server: the ops share key names, and a key one
	// op made a hash (lean.lua's fixed window) would be the wrong type for
	// the next op's INCRBY.
	if err := c.FlushAll(ctx).Err(); err != nil {
		return scriptCostRow{}, err
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		return scriptCostRow{}, err
	}
	if op.setup != nil {
		if err := op.setup(ctx, c); err != nil {
			return scriptCostRow{}, err
		}
	}
	// A first call loads the script (Run falls back to EVAL on NOSCRIPT).
	if err := op.do(ctx, c, "warm"); err != nil {
		return scriptCostRow{}, err
	}
	before, err := rd.stats(ctx)
	if err != nil {
		return scriptCostRow{}, err
	}
	key := scriptCostKey
	var errs []error
	if rate > 0 {
		tick := time.NewTicker(time.Second / time.Duration(rate))
		for i := 0; i < calls; i++ {
			select {
			case <-ctx.Done():
				tick.Stop()
				return scriptCostRow{}, ctx.Err()
			case <-tick.C:
			}
			if err := op.do(ctx, c, key(i)); err != nil {
				errs = append(errs, err)
				break
			}
		}
		tick.Stop()
	} else {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for g := range 8 {
			wg.Go(func() {
				for i := g; i < calls; i += 8 {
					if err := op.do(ctx, c, key(i)); err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
						return
					}
				}
			})
		}
		wg.Wait()
	}
	if len(errs) > 0 {
		return scriptCostRow{}, errors.Join(errs...)
	}
	after, err := rd.stats(ctx)
	if err != nil {
		return scriptCostRow{}, err
	}
	d := after.sub(before)
	row := scriptCostRow{op: op.name, calls: calls, redisCPU: float64(d.cpu.Microseconds()) / float64(calls),
		exec: map[string]float64{}, per: map[string]float64{}}
	for name, n := range d.calls {
		if n > 0 && name != "info" && name != "config|resetstat" {
			row.exec[name] = float64(d.usec[name]) / float64(n)
			row.per[name] = float64(n) / float64(calls)
		}
	}
	return row, nil
}

func writeScriptCost(w io.Writer, rows []scriptCostRow) {
	tableHead(w, "What a call costs Redis: Redis CPU per call (INFO cpu) and execution µs per command (INFO commandstats; a script's includes the commands it runs)",
		"call", "load", "calls", "Redis CPU µs/call", "commands per call × execution µs per command")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %d | %.1f | %s |\n", r.op, r.load, r.calls, r.redisCPU, execMix(r.exec, r.per))
	}
	fmt.Fprintln(w)
}

// execMix formats commands per call and commandstats µs per command, by
// name.
func execMix(exec, per map[string]float64) string {
	names := make([]string, 0, len(exec))
	for n := range exec {
		names = append(names, n)
	}
	slices.Sort(names)
	s := ""
	for i, n := range names {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %.3f × %.1f", n, per[n], exec[n])
	}
	return s
}

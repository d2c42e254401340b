package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"
)

// redisServer is the driver's own redis-server: loopback only, no
// persistence, so it costs nothing but the commands envoy-rls sends.
type redisServer struct {
	proc   *child
	addr   string
	client *redis.Client
}

// findRedisServer returns the redis-server to run: the flag value, else
// the kit's policy (childproc.Tool): /usr/bin (the Debian package's
// location, sometimes missing from PATH), then PATH.
func findRedisServer(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	return childproc.Tool{
		Name:    "bench: redis-server",
		Pinned:  []string{"/usr/bin/redis-server"},
		Path:    []string{"redis-server"},
		Install: "apt-get install -y redis-server, or pass --redis-server",
	}.Find()
}

// startRedis starts redis-server on a free loopback port and waits for PING.
func startRedis(ctx context.Context, bin, dir string) (*redisServer, error) {
	return startRedisNamed(ctx, bin, dir, "redis")
}

// startRedisNamed is startRedis with its log named name (the comparison
// starts one per system).
func startRedisNamed(ctx context.Context, bin, dir, name string) (*redisServer, error) {
	for attempt := 0; ; attempt++ {
		port, err := childproc.FreePort()
		if err != nil {
			return nil, err
		}
		p, err := startChild(name, dir, bin,
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no",
			"--daemonize", "no", "--protected-mode", "no", "--dir", dir)
		if err != nil {
			return nil, err
		}
		r := &redisServer{proc: p, addr: "127.0.0.1:" + strconv.Itoa(port)}
		r.client = redis.NewClient(&redis.Options{Addr: r.addr, PoolSize: 1, MaxRetries: -1})
		err = r.waitPing(ctx)
		if err == nil {
			return r, nil
		}
		r.close()
		if !bindFailed(p) || attempt == 3 {
			return nil, err
		}
	}
}

func (r *redisServer) waitPing(ctx context.Context) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		if r.proc.exited() {
			return fmt.Errorf("bench: redis-server exited:\n%s", r.proc.logTail())
		}
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		err := r.client.Ping(pctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("bench: redis-server did not answer PING: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *redisServer) close() {
	if r.client != nil {
		_ = r.client.Close()
	}
	r.proc.stop()
}

// flush empties the server between scenarios so one scenario's keys do not
// slow the next one's expiry cycle.
func (r *redisServer) flush(ctx context.Context) error {
	if err := r.client.FlushAll(ctx).Err(); err != nil {
		return fmt.Errorf("bench: redis flushall: %w", err)
	}
	return nil
}

// redisStats are the counters of INFO the report uses.
type redisStats struct {
	cpu      time.Duration // used_cpu_user + used_cpu_sys
	commands int64         // total_commands_processed
	reads    int64         // total_reads_processed: socket reads, ~ round trips
	// netIn and netOut are total_net_input_bytes and
	// total_net_output_bytes; infoOut is the size of the INFO reply that
	// took the snapshot, which the next snapshot's netOut includes.
	netIn, netOut, infoOut int64
	evalsha                int64 // cmdstat_evalsha calls
	// calls counts every command by name (INFO commandstats), including
	// those a Lua script runs with redis.call.
	calls map[string]int64
	// usec is each command's execution time in µs (INFO commandstats),
	// by the same names.
	usec map[string]int64
}

// stats reads the counters with one INFO call. That call itself counts as
// one command and one read in the next snapshot; sub removes it.
func (r *redisServer) stats(ctx context.Context) (redisStats, error) {
	text, err := r.client.Info(ctx, "stats", "cpu", "commandstats").Result()
	if err != nil {
		return redisStats{}, fmt.Errorf("bench: redis info: %w", err)
	}
	st, err := parseRedisInfo(text)
	// The reply as sent: a bulk string, "$<len>\r\n<text>\r\n".
	st.infoOut = int64(len(text) + len(strconv.Itoa(len(text))) + 5)
	return st, err
}

func parseRedisInfo(text string) (redisStats, error) {
	s := redisStats{calls: map[string]int64{}, usec: map[string]int64{}}
	var user, sys float64
	var seen int
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		var err error
		switch k {
		case "used_cpu_user":
			user, err = strconv.ParseFloat(v, 64)
			seen++
		case "used_cpu_sys":
			sys, err = strconv.ParseFloat(v, 64)
			seen++
		case "total_commands_processed":
			s.commands, err = strconv.ParseInt(v, 10, 64)
			seen++
		case "total_reads_processed":
			s.reads, err = strconv.ParseInt(v, 10, 64)
		case "total_net_input_bytes":
			s.netIn, err = strconv.ParseInt(v, 10, 64)
		case "total_net_output_bytes":
			s.netOut, err = strconv.ParseInt(v, 10, 64)
		default:
			name, ok := strings.CutPrefix(k, "cmdstat_")
			if !ok {
				continue
			}
			// calls=N,usec=...
			for f := range strings.SplitSeq(v, ",") {
				if n, ok := strings.CutPrefix(f, "calls="); ok {
					var c int64
					c, err = strconv.ParseInt(n, 10, 64)
					s.calls[name] = c
				} else if n, ok := strings.CutPrefix(f, "usec="); ok && err == nil {
					var u int64
					u, err = strconv.ParseInt(n, 10, 64)
					s.usec[name] = u
				}
			}
			if name == "evalsha" {
				s.evalsha = s.calls[name]
			}
		}
		if err != nil {
			return redisStats{}, fmt.Errorf("bench: redis info: %s: %w", k, err)
		}
	}
	if seen < 3 {
		return redisStats{}, errors.New("bench: redis info: missing cpu or stats fields")
	}
	s.cpu = time.Duration((user + sys) * float64(time.Second))
	return s, nil
}

// sub returns the activity between an earlier snapshot and s, minus the INFO
// call that took the later snapshot.
func (s redisStats) sub(before redisStats) redisStats {
	d := redisStats{
		cpu:      s.cpu - before.cpu,
		commands: max(0, s.commands-before.commands-1),
		reads:    max(0, s.reads-before.reads-1),
		// The earlier snapshot's INFO reply went out in between; its
		// command (a few dozen bytes in) is left in.
		netIn:   s.netIn - before.netIn,
		netOut:  max(0, s.netOut-before.netOut-before.infoOut),
		evalsha: s.evalsha - before.evalsha,
		calls:   map[string]int64{},
		usec:    map[string]int64{},
	}
	for name, n := range s.calls {
		if name == "info" {
			n--
		}
		if n -= before.calls[name]; n > 0 {
			d.calls[name] = n
			// The INFO call's own time is not counted yet when INFO
			// reports, so only the calls need correcting.
			d.usec[name] = max(0, s.usec[name]-before.usec[name])
		}
	}
	return d
}

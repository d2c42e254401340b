package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"
)

// row is one load scenario's figures. CPU figures are µs per decision (one
// answered ShouldRateLimit call, whatever its number of descriptors).
type row struct {
	name, title string
	err         error

	decisions  int64
	elapsed    time.Duration
	rps        float64
	p50, p99   time.Duration
	srvCPU     float64 // envoy-rls (or floor) CPU
	genCPU     float64 // load generator CPU
	redis      bool
	redisCPU   float64
	redisCmds  float64
	redisReads float64
	// redisIn and redisOut are Redis's network bytes in and out per
	// decision.
	redisIn, redisOut float64
	evalsha           float64
	perCommand        string // "evalsha 1.00, time 1.00, …", most frequent first
	batchName         string
	batch             float64
	hasBatch          bool
	denied            float64 // fraction answered OVER_LIMIT
	other             float64 // CPU of other processes, % of the machine
	errors            int64
	capped            bool
	// group is scenario.group; admitted counts the calls answered OK and
	// bound is the scenario's bound for the measured interval (0: none).
	group    string
	admitted int64
	bound    float64
}

func newRow(sc scenario, res *loadResult, before, after snapshot) *row {
	r := &row{name: sc.name, title: sc.title, redis: sc.redis, errors: res.errors, capped: res.capped, elapsed: res.elapsed, group: sc.group, admitted: res.ok}
	if sc.bound != nil {
		r.bound = sc.bound(res.elapsed)
	}
	r.decisions = res.answered()
	if r.decisions == 0 || res.elapsed <= 0 {
		return r
	}
	d := float64(r.decisions)
	perDecision := func(t time.Duration) float64 { return float64(t) / float64(time.Microsecond) / d }
	r.rps = d / res.elapsed.Seconds()
	r.p50, r.p99 = res.hist.quantile(0.50), res.hist.quantile(0.99)
	r.srvCPU = perDecision(after.srvCPU - before.srvCPU)
	r.genCPU = perDecision(after.genCPU - before.genCPU)
	r.denied = float64(res.over) / d
	ours := (after.srvCPU - before.srvCPU) + (after.genCPU - before.genCPU)
	if sc.redis {
		ours += after.redis.cpu - before.redis.cpu
	}
	r.other = 100 * max(0, float64(after.busy-before.busy-ours)) / (float64(res.elapsed) * float64(numCPU()))
	if sc.redis {
		rd := after.redis.sub(before.redis)
		r.redisCPU = perDecision(rd.cpu)
		r.redisCmds = float64(rd.commands) / d
		r.redisReads = float64(rd.reads) / d
		r.redisIn, r.redisOut = float64(rd.netIn)/d, float64(rd.netOut)/d
		r.evalsha = float64(rd.evalsha) / d
		r.perCommand = commandMix(rd.calls, d)
		r.batchName, r.batch, r.hasBatch = meanBatch(before.batch, after.batch)
	}
	return r
}

// withRatio formats v and, when the floor has a positive figure, v/floor.
func withRatio(v, floor float64, format string) string {
	s := fmt.Sprintf(format, v)
	if floor > 0 && !math.IsNaN(v) {
		s += fmt.Sprintf(" (%.2f×)", v/floor)
	}
	return s
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func writeLoadTables(w io.Writer, rows []*row) {
	var floor *row
	if len(rows) > 0 && rows[0].name == "floor" && rows[0].err == nil {
		floor = rows[0]
	}
	f := func(get func(*row) float64) float64 {
		if floor == nil {
			return 0
		}
		return get(floor)
	}
	fmt.Fprintln(w, "### Load (ratio to the floor in parentheses)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| scenario | decisions/s | p50 µs | p99 µs | envoy-rls CPU µs/decision | Redis CPU µs/decision | envoy-rls + Redis CPU µs/decision |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, r := range rows {
		if r.err != nil {
			fmt.Fprintf(w, "| %s | failed: %s | | | | | |\n", r.title, oneLine(r.err))
			continue
		}
		redisCPU, total := "—", withRatio(r.srvCPU, f(func(r *row) float64 { return r.srvCPU }), "%.1f")
		if r.redis {
			// Redis CPU is compared with the floor's server CPU: the floor
			// uses no Redis, so that is the only meaningful base.
			redisCPU = withRatio(r.redisCPU, f(func(r *row) float64 { return r.srvCPU }), "%.1f")
			total = withRatio(r.srvCPU+r.redisCPU, f(func(r *row) float64 { return r.srvCPU }), "%.1f")
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", r.title,
			withRatio(r.rps, f(func(r *row) float64 { return r.rps }), "%.0f"),
			withRatio(micros(r.p50), f(func(r *row) float64 { return micros(r.p50) }), "%.0f"),
			withRatio(micros(r.p99), f(func(r *row) float64 { return micros(r.p99) }), "%.0f"),
			withRatio(r.srvCPU, f(func(r *row) float64 { return r.srvCPU }), "%.1f"),
			redisCPU, total)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "### Details")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| scenario | decisions measured | denied | RPC errors | Redis commands/decision | Redis socket reads/decision | EVALSHA/decision | mean batch size (/metrics) | generator CPU µs/call | other load |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	var mixes []string
	for _, r := range rows {
		if r.err != nil {
			continue
		}
		cmds, reads, evals, batch := "—", "—", "—", "—"
		if r.redis {
			cmds = fmt.Sprintf("%.3f", r.redisCmds)
			reads = fmt.Sprintf("%.3f", r.redisReads)
			evals = fmt.Sprintf("%.3f", r.evalsha)
			if r.hasBatch {
				batch = fmt.Sprintf("%.2f (%s)", r.batch, r.batchName)
			}
		}
		n := fmt.Sprintf("%d in %.1fs", r.decisions, r.elapsed.Seconds())
		if r.capped {
			n += " (request cap)"
		}
		fmt.Fprintf(w, "| %s | %s | %.1f%% | %d | %s | %s | %s | %s | %.1f | %.0f%% |\n",
			r.title, n, 100*r.denied, r.errors, cmds, reads, evals, batch, r.genCPU, r.other)
		if r.perCommand != "" {
			mixes = append(mixes, fmt.Sprintf("- %s: %s", r.title, r.perCommand))
		}
	}
	fmt.Fprintln(w)
	if len(mixes) > 0 {
		fmt.Fprintln(w, "Redis commands per decision by name (commands run inside Lua scripts included):")
		fmt.Fprintln(w)
		for _, m := range mixes {
			fmt.Fprintln(w, m)
		}
		fmt.Fprintln(w)
	}
}

// commandMix lists the commands Redis ran per decision, most frequent
// first, leaving out those below one per thousand decisions.
func commandMix(calls map[string]int64, decisions float64) string {
	type nc struct {
		name string
		n    int64
	}
	var list []nc
	for name, n := range calls {
		if float64(n)/decisions >= 0.001 {
			list = append(list, nc{name, n})
		}
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].n != list[j].n {
			return list[i].n > list[j].n
		}
		return list[i].name < list[j].name
	})
	parts := make([]string, len(list))
	for i, c := range list {
		parts[i] = fmt.Sprintf("%s %.3f", strings.ReplaceAll(c.name, "|", " "), float64(c.n)/decisions)
	}
	return strings.Join(parts, ", ")
}

func oneLine(err error) string {
	s := strings.ReplaceAll(err.Error(), "\n", " ")
	s = strings.ReplaceAll(s, "|", "/")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

func writeMemory(w io.Writer, m *memResult) {
	fmt.Fprintln(w, "### In-process store memory")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| distinct live keys | RSS at start | RSS with the keys | growth | bytes/key | peak RSS | fill |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	per := 0.0
	if m.keys > 0 {
		per = float64(m.rss-m.baseRSS) / float64(m.keys)
	}
	fmt.Fprintf(w, "| %d | %.1f MB | %.1f MB | %.1f MB | %.0f | %.1f MB | %d calls × %d descriptors in %.1fs |\n\n",
		m.keys, mb(m.baseRSS), mb(m.rss), mb(m.rss-m.baseRSS), per, mb(m.hwm), m.fillCalls, m.perRequest, m.fill.Seconds())
}

// soakGrowth compares the last RSS sample with the one halfway through:
// after the first half, keys expire as fast as they arrive, so a bounded
// store shows no growth there.
func soakGrowth(s *soakResult) (mid, last int64, ok bool) {
	if len(s.samples) < 3 {
		return 0, 0, false
	}
	end := s.samples[len(s.samples)-1]
	half := end.at / 2
	for _, p := range s.samples {
		if p.at >= half {
			return p.rss, end.rss, true
		}
	}
	return 0, 0, false
}

func writeSoak(w io.Writer, s *soakResult) {
	fmt.Fprintln(w, "### Soak: random keys on the in-process store (keys expire 10 s after use)")
	fmt.Fprintln(w)
	if s.load != nil && s.load.elapsed > 0 {
		fmt.Fprintf(w, "%d decisions in %.0fs (%.0f/s, every one a new key), %d errors.\n\n",
			s.load.answered(), s.load.elapsed.Seconds(), float64(s.load.answered())/s.load.elapsed.Seconds(), s.load.errors)
	}
	fmt.Fprintf(w, "RSS curve: `%s`\n\n", sparkline(s.samples))
	fmt.Fprintln(w, "| t (s) | RSS MB | decisions so far |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, p := range s.samples {
		fmt.Fprintf(w, "| %.0f | %.1f | %d |\n", p.at.Seconds(), mb(p.rss), p.decisions)
	}
	fmt.Fprintln(w)
	if mid, last, ok := soakGrowth(s); ok {
		fmt.Fprintf(w, "RSS halfway %.1f MB, at the end %.1f MB (%+.1f%%).\n\n", mb(mid), mb(last), 100*(float64(last)/float64(mid)-1))
	}
}

func sparkline(samples []soakSample) string {
	if len(samples) == 0 {
		return ""
	}
	lo, hi := samples[0].rss, samples[0].rss
	for _, p := range samples {
		lo, hi = min(lo, p.rss), max(hi, p.rss)
	}
	const bars = "▁▂▃▄▅▆▇█"
	runes := []rune(bars)
	var sb strings.Builder
	for _, p := range samples {
		i := 0
		if hi > lo {
			i = int(float64(p.rss-lo) / float64(hi-lo) * float64(len(runes)-1))
		}
		sb.WriteRune(runes[i])
	}
	return fmt.Sprintf("%s  (%.1f–%.1f MB)", sb.String(), mb(lo), mb(hi))
}

// writeTargets sets the figures against issue 6's targets. It reports;
// it asserts nothing (the figures depend on the machine).
func writeTargets(w io.Writer, o options, rows []*row, m *memResult, s *soakResult) {
	byName := map[string]*row{}
	for _, r := range rows {
		if r.err == nil {
			byName[r.name] = r
		}
	}
	type line struct{ target, measured, verdict string }
	var lines []line
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "not met"
	}
	floor := byName["floor"]
	cpuTarget := func(name string, limit float64) {
		r := byName[name]
		if r == nil || floor == nil || floor.srvCPU <= 0 {
			return
		}
		ratio := r.srvCPU / floor.srvCPU
		lines = append(lines, line{
			fmt.Sprintf("envoy-rls CPU/decision ≤ %.1f× floor (%s)", limit, r.title),
			fmt.Sprintf("%.1f µs vs %.1f µs = %.2f×", r.srvCPU, floor.srvCPU, ratio),
			verdict(ratio <= limit),
		})
	}
	cpuTarget("inproc", 1.2)
	cpuTarget("redis-token-bucket", 1.4)
	cpuTarget("redis-sliding-window", 1.4)
	if r, paced := byName["redis-token-bucket"], byName[floorPacedName]; r != nil && paced != nil && paced.srvCPU > 0 {
		lines = append(lines, line{
			"(context, not a target) envoy-rls CPU/decision, Redis token_bucket, against the floor paced to its decisions/s",
			fmt.Sprintf("%.1f µs vs %.1f µs (floor at %.0f/s) = %.2f×", r.srvCPU, paced.srvCPU, paced.rps, r.srvCPU/paced.srvCPU),
			"—",
		})
	}
	if r := byName["redis-token-bucket"]; r != nil {
		lines = append(lines, line{
			fmt.Sprintf("Redis CPU/decision ≤ 10 µs, token_bucket, c=32 (run at c=%d)", o.concurrency),
			fmt.Sprintf("%.1f µs", r.redisCPU), verdict(r.redisCPU <= 10),
		})
	}
	if m != nil {
		lines = append(lines, line{
			"1 million live keys in the in-process store under 200 MB RSS",
			fmt.Sprintf("%.1f MB with %d keys", mb(m.rss), m.keys), verdict(m.keys >= 1_000_000 && m.rss < 200<<20),
		})
	}
	if s != nil {
		if mid, last, ok := soakGrowth(s); ok {
			lines = append(lines, line{
				fmt.Sprintf("RSS stable over the soak (%v; end ≤ 1.10× halfway)", o.soak),
				fmt.Sprintf("%.1f → %.1f MB", mb(mid), mb(last)), verdict(float64(last) <= 1.10*float64(mid)),
			})
		}
	}
	if len(lines) == 0 {
		return
	}
	tableHead(w, "Targets (issue 6; reported, not asserted)", "target", "measured", "")
	for _, l := range lines {
		fmt.Fprintf(w, "| %s | %s | %s |\n", l.target, l.measured, l.verdict)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Rule match + key encoding allocations: see the `go test -bench` output above (allocs/op).")
	fmt.Fprintln(w)
}

// writeLeaseTable reports issue 12's rows side by side: decisions/s
// against the in-process store on the same hot key, Redis's work per
// decision, and the admitted count against the limit's bound.
func writeLeaseTable(w io.Writer, rows []*row) {
	var lease []*row
	var inproc float64
	for _, r := range rows {
		if r.group == "" || r.err != nil {
			continue
		}
		lease = append(lease, r)
		if r.name == "hot-inproc" {
			inproc = r.rps
		}
	}
	if len(lease) == 0 {
		return
	}
	tableHead(w, "Leases and batching (issue 12)", "scenario", "decisions/s (× in-process hot key)", "p50 µs", "p99 µs",
		"envoy-rls CPU µs/decision", "Redis CPU µs/decision", "Redis commands/decision", "EVALSHA/decision", "admitted / bound")
	for _, r := range lease {
		rps := fmt.Sprintf("%.0f", r.rps)
		if r.group == "hot" && inproc > 0 {
			rps = withRatio(r.rps, inproc, "%.0f")
		}
		redisCPU, cmds, evals := "—", "—", "—"
		if r.redis {
			redisCPU, cmds, evals = fmt.Sprintf("%.1f", r.redisCPU), fmt.Sprintf("%.4f", r.redisCmds), fmt.Sprintf("%.4f", r.evalsha)
		}
		bound := "—"
		if r.bound > 0 {
			bound = fmt.Sprintf("%d / %.0f (%.1f%%)", r.admitted, r.bound, 100*float64(r.admitted)/r.bound)
		}
		fmt.Fprintf(w, "| %s | %s | %.0f | %.0f | %.1f | %s | %s | %s | %s |\n", r.title, rps, micros(r.p50), micros(r.p99), r.srvCPU, redisCPU, cmds, evals, bound)
	}
	fmt.Fprintln(w)
}

// tableHead writes a table's title (a level-3 heading) and its header rows.
func tableHead(w io.Writer, title string, columns ...string) {
	fmt.Fprintf(w, "### %s\n\n", title)
	fmt.Fprintf(w, "| %s |\n", strings.Join(columns, " | "))
	fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", len(columns)))
}

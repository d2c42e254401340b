package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// The wake-up measurement's tables (wakeups.go).

// ioSyscalls are the syscalls that move a request's bytes; the rest are
// the waits and hand-offs around them (epoll_pwait, futex, nanosleep…).
var ioSyscalls = []string{"read", "write", "readv", "writev", "recvfrom", "sendto", "recvmsg", "sendmsg"}

// wakeFigure is one figure of the table, read from a sample.
type wakeFigure struct {
	name string
	get  func(wakeSample) float64
	// traced figures come from the trace or strace window; they are
	// missing when that window failed.
	fromTrace, fromStrace bool
	format                string
}

func wakeFigures() []wakeFigure {
	return []wakeFigure{
		{name: "service CPU µs", get: func(s wakeSample) float64 { return s.cpu }, format: "%.1f"},
		{name: "context switches (voluntary + involuntary)", get: func(s wakeSample) float64 { return s.vcs + s.ivcs }, format: "%.2f"},
		{name: "voluntary", get: func(s wakeSample) float64 { return s.vcs }, format: "%.2f"},
		{name: "involuntary", get: func(s wakeSample) float64 { return s.ivcs }, format: "%.2f"},
		{name: "goroutines woken", get: func(s wakeSample) float64 { return s.woken }, fromTrace: true, format: "%.2f"},
		{name: "goroutines created", get: func(s wakeSample) float64 { return s.created }, fromTrace: true, format: "%.2f"},
		{name: "syscalls", get: func(s wakeSample) float64 { return s.sysTotal }, fromStrace: true, format: "%.2f"},
		{name: "I/O syscalls", get: ioPerDecision, fromStrace: true, format: "%.2f"},
	}
}

func ioPerDecision(s wakeSample) float64 {
	var n float64
	for _, name := range ioSyscalls {
		n += s.syscalls[name]
	}
	return n
}

// usable reports whether s has the figure f.
func (f wakeFigure) usable(s wakeSample) bool {
	return !(f.fromTrace && (s.traceErr != nil || s.traceDecisions == 0)) && !(f.fromStrace && (s.sysErr != nil || s.straceDecisions == 0))
}

// wakeMedian is the median of f over a cell's usable samples; ok false
// when none is.
func wakeMedian(c *cell[wakeSample], f wakeFigure) (float64, bool) {
	if c == nil {
		return 0, false
	}
	var xs []wakeSample
	for _, s := range c.samples {
		if f.usable(s) {
			xs = append(xs, s)
		}
	}
	return median(xs, f.get), len(xs) > 0
}

// wakeRatio is the median over rounds of f's ratio a / b, from the rounds
// where both have the figure and, when moderate, neither is saturated;
// n is how many rounds it was taken from.
func wakeRatio(a, b *cell[wakeSample], f wakeFigure, moderate bool) (ratio float64, n int) {
	if a == nil || b == nil {
		return 0, 0
	}
	byRound := map[int]wakeSample{}
	for _, s := range b.samples {
		byRound[s.round] = s
	}
	var rs []float64
	for _, x := range a.samples {
		y, ok := byRound[x.round]
		if !ok || !f.usable(x) || !f.usable(y) || f.get(y) <= 0 {
			continue
		}
		if moderate && (x.saturated() || y.saturated()) {
			continue
		}
		rs = append(rs, f.get(x)/f.get(y))
	}
	return median(rs, func(v float64) float64 { return v }), len(rs)
}

// saturatedRounds counts the rounds in which the cell's system did not
// hold the offered rate.
func saturatedRounds(c *cell[wakeSample]) int {
	n := 0
	if c != nil {
		for _, s := range c.samples {
			if s.saturated() {
				n++
			}
		}
	}
	return n
}

// writeWakeups writes the wake-up table (medians, with the median of the
// per-round ratios to the reference) and the targets.
func writeWakeups(w io.Writer, o options, cells map[wakeCellKey]*cell[wakeSample]) {
	figs := wakeFigures()
	cols := []string{"load", "system", "decisions/s (held)"}
	for _, f := range figs {
		cols = append(cols, f.name+" /decision")
	}
	cols = append(cols, "syscalls by kind /decision (failed: EAGAIN mostly)", "decisions/s under strace")
	tableHead(w, fmt.Sprintf("Wake-ups per decision, medians of %d rounds (in parentheses: median of the per-round ratios to the reference)", o.rounds), cols...)
	for _, load := range cmpLoads(o) {
		ref := cells[wakeCellKey{load.name, sysRef}]
		for i, sys := range []cmpSystem{sysFloor, sysFloorRedis, sysRef, sysRLS} {
			c := cells[wakeCellKey{load.name, sys}]
			title := ""
			if i == 0 {
				title = load.title
			}
			if c == nil || len(c.samples) == 0 {
				failed := 0
				if c != nil {
					failed = len(c.errs)
				}
				fmt.Fprintf(w, "| %s | %s | no sample (%d failed) |%s\n", title, systemTitles[sys], failed, strings.Repeat(" |", len(cols)-3))
				continue
			}
			held := fmt.Sprintf("%.0f", median(c.samples, func(s wakeSample) float64 { return s.rps }))
			if n := saturatedRounds(c); n > 0 {
				held += fmt.Sprintf(" **saturated in %d of %d rounds**", n, len(c.samples))
			}
			cellsOut := []string{title, systemTitles[sys], held}
			for _, f := range figs {
				v, ok := wakeMedian(c, f)
				if !ok {
					cellsOut = append(cellsOut, "—")
					continue
				}
				s := fmt.Sprintf(f.format, v)
				if sys != sysRef {
					if r, n := wakeRatio(c, ref, f, false); n > 0 {
						s += fmt.Sprintf(" (%.2f×)", r)
					}
				}
				cellsOut = append(cellsOut, s)
			}
			cellsOut = append(cellsOut, syscallMix(c), fmt.Sprintf("%.0f", median(c.samples, func(s wakeSample) float64 { return s.straceRPS })))
			fmt.Fprintf(w, "| %s |\n", strings.Join(cellsOut, " | "))
		}
	}
	fmt.Fprintln(w)
	writeWakeTargets(w, o, cells)
}

// syscallMix formats the cell's median syscalls per decision by kind, the
// most frequent first, leaving out kinds below 0.01 per decision.
func syscallMix(c *cell[wakeSample]) string {
	var xs []wakeSample
	names := map[string]bool{}
	for _, s := range c.samples {
		if s.sysErr == nil && s.straceDecisions > 0 {
			xs = append(xs, s)
			for n := range s.syscalls {
				names[n] = true
			}
		}
	}
	if len(xs) == 0 {
		return "—"
	}
	type kv struct {
		name string
		v    float64
	}
	var kinds []kv
	for n := range names {
		if v := median(xs, func(s wakeSample) float64 { return s.syscalls[n] }); v >= 0.01 {
			kinds = append(kinds, kv{n, v})
		}
	}
	sort.Slice(kinds, func(i, j int) bool {
		if kinds[i].v != kinds[j].v {
			return kinds[i].v > kinds[j].v
		}
		return kinds[i].name < kinds[j].name
	})
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%s %.2f", k.name, k.v)
		if e := median(xs, func(s wakeSample) float64 { return s.sysErrors[k.name] }); e >= 0.01 {
			parts[i] += fmt.Sprintf(" (%.2f failed)", e)
		}
	}
	return strings.Join(parts, ", ")
}

// writeWakeTargets sets the per-round ratios against issue 42's targets,
// leaving saturated rounds out, beside what the floor that sends one Redis
// command per call reaches against the same reference (a target below it
// is out of reach of any Go gRPC service on go-redis) and how far above
// that floor envoy-rls stands. It reports; it asserts nothing.
func writeWakeTargets(w io.Writer, o options, cells map[wakeCellKey]*cell[wakeSample]) {
	figs := wakeFigures()
	cpu, switches := figs[0], figs[1]
	tableHead(w, "Targets (issue 42; medians of the per-round ratios, saturated rounds left out; reported, not asserted)",
		"load", "figure", "target (envoy-rls / reference)", "measured", "rounds", "", "floor + one Redis command / reference", "envoy-rls / floor + one Redis command")
	for _, load := range cmpLoads(o) {
		goals := []struct {
			f     wakeFigure
			limit float64
		}{{cpu, 0.5}}
		if load.name == "1000" {
			goals = []struct {
				f     wakeFigure
				limit float64
			}{{cpu, 0.6}, {switches, 0.5}}
		}
		rls, ref := cells[wakeCellKey{load.name, sysRLS}], cells[wakeCellKey{load.name, sysRef}]
		floor := cells[wakeCellKey{load.name, sysFloorRedis}]
		for _, g := range goals {
			ratio := func(a, b *cell[wakeSample]) string {
				r, n := wakeRatio(a, b, g.f, true)
				if n == 0 {
					return "—"
				}
				return fmt.Sprintf("%.2f× (%d)", r, n)
			}
			r, n := wakeRatio(rls, ref, g.f, true)
			if n == 0 {
				fmt.Fprintf(w, "| %s | %s | ≤ %.1f× | — | 0 | no moderate-load round (saturated or failed) | %s | %s |\n", load.title, g.f.name, g.limit, ratio(floor, ref), ratio(rls, floor))
				continue
			}
			verdict := "not met"
			if r <= g.limit {
				verdict = "met"
			}
			fmt.Fprintf(w, "| %s | %s | ≤ %.1f× | %.2f× | %d | %s | %s | %s |\n", load.title, g.f.name, g.limit, r, n, verdict, ratio(floor, ref), ratio(rls, floor))
		}
	}
	fmt.Fprintln(w)
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// The probes of the wake-up measurement (wakeups.go): context switches from
// /proc, syscalls from strace, goroutine wake-ups from an execution trace.

var lookPath = exec.LookPath

// switches are a process's context switches, summed over its threads.
type switches struct{ voluntary, involuntary int64 }

// procSwitches sums voluntary_ctxt_switches and nonvoluntary_ctxt_switches
// over every thread of pid: /proc/PID/status counts the main thread only.
// A thread that exits takes its counts with it; the Go runtime keeps its
// threads, so over a window the sum only grows.
func procSwitches(pid int) (switches, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return switches{}, fmt.Errorf("bench: read context switches: %w", err)
	}
	var sum switches
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, t.Name(), "status"))
		if err != nil {
			continue // the thread exited since the listing
		}
		v, iv := parseSwitches(string(b))
		sum.voluntary += v
		sum.involuntary += iv
	}
	return sum, nil
}

// parseSwitches reads the two context-switch counters of a status file.
func parseSwitches(status string) (voluntary, involuntary int64) {
	for line := range strings.SplitSeq(status, "\n") {
		name, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(val), 10, 64)
		if err != nil {
			continue
		}
		switch name {
		case "voluntary_ctxt_switches":
			voluntary = n
		case "nonvoluntary_ctxt_switches":
			involuntary = n
		}
	}
	return voluntary, involuntary
}

// tracedBy reports whether every thread of pid has a tracer.
func tracedBy(pid int) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, t.Name(), "status"))
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "TracerPid:"); ok && strings.TrimSpace(v) == "0" {
				return false
			}
		}
	}
	return true
}

// straceWindow attaches `strace -c -f` to every thread of pid, counts the
// decisions (progress) from the moment all are attached for window, then
// detaches and returns the syscalls by kind, the decisions and their rate.
func straceWindow(ctx context.Context, strace string, pid int, window time.Duration, progress *atomic.Int64, dir string) (map[string]straceCount, int64, float64, error) {
	out := filepath.Join(dir, fmt.Sprintf("strace-%d.txt", pid))
	defer os.Remove(out)
	cmd := exec.Command(strace, "-c", "-f", "-qq", "-o", out, "-p", strconv.Itoa(pid))
	cmd.Stderr = io.Discard
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, 0, 0, fmt.Errorf("bench: strace: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() error {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case err := <-exited:
			return err
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			return errors.New("bench: strace did not detach in 10s")
		}
	}
	// Count from the moment every thread is traced, so that the window's
	// syscalls and its decisions start together.
	deadline := time.Now().Add(5 * time.Second)
	for !tracedBy(pid) {
		if time.Now().After(deadline) {
			_ = stop()
			return nil, 0, 0, errors.New("bench: strace: not attached to every thread within 5s")
		}
		if err := sleepCtx(ctx, 5*time.Millisecond); err != nil {
			_ = stop()
			return nil, 0, 0, err
		}
	}
	n0, t0 := progress.Load(), time.Now()
	werr := sleepCtx(ctx, window)
	n1, t1 := progress.Load(), time.Now()
	if err := stop(); err != nil && werr == nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return nil, 0, 0, fmt.Errorf("bench: strace: %w", err)
		}
	}
	if werr != nil {
		return nil, 0, 0, werr
	}
	f, err := os.Open(out)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("bench: strace summary: %w", err)
	}
	defer f.Close()
	calls, err := parseStraceSummary(f)
	if err != nil {
		return nil, 0, 0, err
	}
	return calls, n1 - n0, float64(n1-n0) / t1.Sub(t0).Seconds(), nil
}

// straceCount is one syscall's line of strace -c: its calls, and how many
// of them failed (a read that found nothing to read: EAGAIN).
type straceCount struct{ calls, errors int64 }

// parseStraceSummary reads strace -c's table: "% time seconds usecs/call
// calls errors syscall", the errors column blank when there were none.
func parseStraceSummary(r io.Reader) (map[string]straceCount, error) {
	calls := map[string]straceCount{}
	sc := bufio.NewScanner(r)
	header := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "---") {
			continue
		}
		if f[0] == "%" {
			header = true
			continue
		}
		if !header || (len(f) != 5 && len(f) != 6) || f[len(f)-1] == "total" {
			continue
		}
		n, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bench: strace summary: %q: %w", sc.Text(), err)
		}
		var e int64
		if len(f) == 6 {
			if e, err = strconv.ParseInt(f[4], 10, 64); err != nil {
				return nil, fmt.Errorf("bench: strace summary: %q: %w", sc.Text(), err)
			}
		}
		c := calls[f[len(f)-1]]
		c.calls += n
		c.errors += e
		calls[f[len(f)-1]] = c
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("bench: strace summary: %w", err)
	}
	if !header {
		return nil, errors.New("bench: strace summary: no table")
	}
	return calls, nil
}

// countTraceWakeups counts the goroutine state transitions of an execution
// trace that are wake-ups (Waiting->Runnable: a goroutine unblocked by a
// channel, a lock, the network poller or a timer) and creations
// (NotExist->Runnable), with the toolchain's own parser
// (`go tool trace -d=parsed`), so that no trace library is needed.
func countTraceWakeups(ctx context.Context, path string) (woken, created int64, err error) {
	gobin, err := lookPath("go")
	if err != nil {
		return 0, 0, fmt.Errorf("bench: trace: the go command is needed to parse the trace: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, gobin, "tool", "trace", "-d=parsed", path)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, fmt.Errorf("bench: trace: %w", err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return 0, 0, fmt.Errorf("bench: trace: %w", err)
	}
	woken, created = countTransitions(stdout)
	if err := cmd.Wait(); err != nil {
		return 0, 0, fmt.Errorf("bench: trace: go tool trace: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return woken, created, nil
}

// countTransitions counts the parsed trace's goroutine wake-ups and
// creations; it drains r.
func countTransitions(r io.Reader) (woken, created int64) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.Contains(line, []byte("StateTransition")) {
			continue
		}
		switch {
		case bytes.Contains(line, []byte(" Waiting->Runnable")):
			woken++
		case bytes.Contains(line, []byte(" NotExist->Runnable")):
			created++
		}
	}
	_, _ = io.Copy(io.Discard, r)
	return woken, created
}

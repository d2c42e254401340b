package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"
)

// clockTick is the unit of utime/stime in /proc/<pid>/stat. USER_HZ is 100
// on every Linux architecture Go supports (sysconf(_SC_CLK_TCK) would need
// cgo), so one tick is 10 ms.
const clockTick = 10 * time.Millisecond

// child is one process the driver started (envoy-rls, the floor, Redis). It
// runs in its own process group so that stop reaches anything it forks, and
// gets SIGKILL if the driver dies without cleaning up.
type child struct {
	name string
	proc *childproc.Proc
	log  string

	stopOnce sync.Once
}

// startChild starts bin with args, its stdout and stderr going to
// dir/<name>.log.
func startChild(name, dir, bin string, args ...string) (*child, error) {
	return startChildEnv(name, dir, nil, bin, args...)
}

// startChildEnv is startChild with env added to the driver's environment
// (the reference takes its settings from the environment).
func startChildEnv(name, dir string, env []string, bin string, args ...string) (*child, error) {
	logPath := filepath.Join(dir, name+".log")
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("bench: %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout = out
	cmd.Stderr = out
	proc, err := childproc.Start(cmd, func() { out.Close() })
	if err != nil {
		out.Close()
		return nil, fmt.Errorf("bench: start %s (%s): %w", name, bin, err)
	}
	return &child{name: name, proc: proc, log: logPath}, nil
}

func (c *child) pid() int { return c.proc.Pid() }

func (c *child) exited() bool { return c.proc.Exited() }

// stop sends SIGTERM to the process group, and SIGKILL when it has not
// exited after a grace period. It is safe to call more than once.
func (c *child) stop() {
	c.stopOnce.Do(func() { c.proc.Stop(5 * time.Second) })
}

// logTail returns the last lines of the child's output, for error messages.
func (c *child) logTail() string {
	b, err := os.ReadFile(c.log)
	if err != nil {
		return ""
	}
	const keep = 2000
	if len(b) > keep {
		b = b[len(b)-keep:]
	}
	return strings.TrimSpace(string(b))
}

// waitHTTPReady polls url until it answers 200, the child exits, ctx ends
// or timeout passes.
func waitHTTPReady(ctx context.Context, c *child, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	var last error
	for {
		if c.exited() {
			return fmt.Errorf("bench: %s exited before it was ready:\n%s", c.name, c.logTail())
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("bench: %s: %w", c.name, err)
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s answered %s", url, resp.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: %s not ready: %w (last: %v)\n%s", c.name, ctx.Err(), last, c.logTail())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// bindFailed reports whether a child that exited early lost its port.
func bindFailed(c *child) bool {
	return c.exited() && strings.Contains(strings.ToLower(c.logTail()), "address already in use")
}

// procCPU returns the user+system CPU time pid has used so far.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("bench: read cpu: %w", err)
	}
	// The command name (field 2) may hold spaces and parentheses; the
	// fixed-format fields start after its last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("bench: read cpu: malformed /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, errors.New("bench: read cpu: short /proc stat")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("bench: read cpu: %w", err)
	}
	return time.Duration(ut+st) * clockTick, nil
}

// procMem returns VmRSS and VmHWM (peak RSS) of pid in bytes.
func procMem(pid int) (rss, hwm int64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, fmt.Errorf("bench: read memory: %w", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		name, val, ok := strings.Cut(line, ":")
		if !ok || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("bench: read memory: %s: %w", name, err)
		}
		if name == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
	}
	if rss == 0 {
		return 0, 0, errors.New("bench: read memory: no VmRSS")
	}
	return rss, hwm, nil
}

// machineBusy returns the CPU time all CPUs have spent not idle since boot,
// from the first line of /proc/stat. Set against the time of the processes
// the driver knows, it shows how much other load shared the machine.
func machineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("bench: read /proc/stat: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, errors.New("bench: read /proc/stat: no cpu line")
	}
	var busy int64
	// user nice system idle iowait irq softirq steal (guest time is
	// already inside user and nice).
	for i, v := range f[1:min(len(f), 9)] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("bench: read /proc/stat: %w", err)
		}
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return time.Duration(busy) * clockTick, nil
}

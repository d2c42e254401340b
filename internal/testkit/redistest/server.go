package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"
)

// startTimeout bounds how long a process may take to answer PING.
const startTimeout = 15 * time.Second

// Server is one redis-server process (a standalone server, a cluster node, a
// replica or a sentinel). Its methods are safe for concurrent use.
type Server struct {
	// Addr is the loopback host:port the server listens on.
	Addr string
	// Port is the port of Addr.
	Port int
	// BusPort is the cluster bus port of a cluster node, 0 otherwise.
	BusPort int
	// TLSAddr is the TLS listener of a StartStandaloneTLS server, "" for
	// others.
	TLSAddr string
	// Dir is the server's working directory (logs, nodes.conf).
	Dir string

	argv []string

	mu     sync.Mutex
	proc   *childproc.Proc
	closed bool
}

// errPortInUse marks a start that lost its port to another process between
// allocation and bind; the caller retries with fresh ports.
var errPortInUse = errors.New("redistest: port already in use")

// StartStandalone starts a standalone redis-server. The caller must Close
// it. Use it from TestMain; tests use Standalone or SharedStandalone.
func StartStandalone() (*Server, error) {
	return launch("standalone", func(dir string, ports []int) ([]string, error) {
		return baseArgs(dir, ports[0]), nil
	}, 1)
}

// Standalone starts a standalone redis-server for this test and stops it at
// cleanup. It fails the test when redis-server is missing.
func Standalone(t testing.TB) *Server {
	t.Helper()
	return startForTest(t, StartStandalone)
}

// baseArgs are the arguments every data node gets: loopback only, no
// persistence (a restart loses data and scripts, like a crash would), logs in
// dir.
func baseArgs(dir string, port int) []string {
	return []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--logfile", filepath.Join(dir, "redis.log"),
		"--daemonize", "no",
		"--protected-mode", "no",
		"--save", "",
		"--appendonly", "no",
	}
}

// launch makes a directory, allocates nports free loopback ports (the first
// is the client port) and starts redis-server with argv(dir, ports),
// retrying with new ports when one was taken in the meantime.
func launch(name string, argv func(dir string, ports []int) ([]string, error), nports int) (*Server, error) {
	if _, _, err := binaries(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "redistest-"+name+"-")
	if err != nil {
		return nil, fmt.Errorf("redistest: %s: %w", name, err)
	}
	for attempt := 0; ; attempt++ {
		ports, err := childproc.FreePorts(nports)
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("redistest: %s: %w", name, err)
		}
		args, err := argv(dir, ports)
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("redistest: %s: %w", name, err)
		}
		s := &Server{
			Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
			Port: ports[0],
			Dir:  dir,
			argv: args,
		}
		if nports > 1 {
			s.BusPort = ports[1]
		}
		err = s.start()
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, errPortInUse) || attempt == 4 {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("redistest: %s: %w", name, err)
		}
		// Start over with clean logs so the next port check is not fooled.
		os.Remove(filepath.Join(dir, "redis.log"))
		os.Remove(filepath.Join(dir, "stderr.log"))
	}
}

// launchAll launches n servers alike (name, argv and nports as for launch)
// in parallel. It returns every server, with nil for those that failed to
// start, and their failures joined; the caller closes what started.
func launchAll(n int, name string, argv func(dir string, ports []int) ([]string, error), nports int) ([]*Server, error) {
	servers := make([]*Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range servers {
		wg.Go(func() { servers[i], errs[i] = launch(name, argv, nports) })
	}
	wg.Wait()
	return servers, errors.Join(errs...)
}

// addrs returns the addresses of servers.
func addrs(servers []*Server) []string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = s.Addr
	}
	return out
}

// start runs the process and waits until it answers PING.
func (s *Server) start() error {
	bin, _, err := binaries()
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("redistest: %s: server closed", s.Addr)
	}
	if s.proc != nil {
		return fmt.Errorf("redistest: %s: already running", s.Addr)
	}
	out, err := os.OpenFile(filepath.Join(s.Dir, "stderr.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("redistest: %s: %w", s.Addr, err)
	}
	cmd := exec.Command(bin, s.argv...)
	cmd.Dir = s.Dir
	cmd.Stdout = out
	cmd.Stderr = out
	// Its process group lets cleanup kill everything the server forks
	// (e.g. a background save child).
	p, err := childproc.Start(cmd, func() { out.Close() })
	if err != nil {
		out.Close()
		return fmt.Errorf("redistest: start %s: %w", bin, err)
	}
	if err := waitPing(s.Addr, p.Pid(), p.Done()); err != nil {
		p.Kill()
		logs := s.logTail()
		if strings.Contains(logs, "Address already in use") {
			return fmt.Errorf("%w: %s", errPortInUse, s.Addr)
		}
		return fmt.Errorf("redistest: %s did not start: %w\n%s", s.Addr, err, logs)
	}
	s.proc = p
	return nil
}

// waitPing polls addr with a raw RESP INFO until the server answering is
// our process (its process_id is pid), the process exits or startTimeout
// passes. It speaks RESP directly so that readiness does not depend on
// client pool state or retries. Checking the pid, not just any answer,
// matters when tests run in parallel: a port picked as free may be taken
// back by another test's server restarting on it, and our process, failing
// to bind, would otherwise be mistaken for that server, whose restarts
// would then wipe our test's data.
func waitPing(addr string, pid int, done <-chan struct{}) error {
	deadline := time.Now().Add(startTimeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return errors.New("process exited")
		default:
		}
		if last = pingPID(addr, pid); last == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("no answer from pid %d within %v: %w", pid, startTimeout, last)
}

// pingPID asks addr for INFO server and checks that process pid answers.
func pingPID(addr string, pid int) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")); err != nil {
		return err
	}
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "$")))
	if !strings.HasPrefix(head, "$") || err != nil || n < 0 {
		return fmt.Errorf("INFO answered %q", strings.TrimSpace(head))
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return err
	}
	for _, line := range strings.Split(string(body), "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			if v != strconv.Itoa(pid) {
				return fmt.Errorf("%s is answered by another process (pid %s, ours %d)", addr, v, pid)
			}
			return nil
		}
	}
	return errors.New("INFO server has no process_id")
}

// logTail returns the end of the server's log files for error messages.
func (s *Server) logTail() string {
	var b strings.Builder
	for _, name := range []string{"stderr.log", "redis.log"} {
		data, err := os.ReadFile(filepath.Join(s.Dir, name))
		if err != nil || len(data) == 0 {
			continue
		}
		if len(data) > 2048 {
			data = data[len(data)-2048:]
		}
		fmt.Fprintf(&b, "--- %s (tail) ---\n%s\n", filepath.Join(s.Dir, name), data)
	}
	return b.String()
}

// stop sends sig to the running process and waits for it to exit, escalating
// to SIGKILL after grace. It is a no-op when the server is not running.
func (s *Server) stop(sig syscall.Signal, grace time.Duration) {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p == nil {
		return
	}
	// A stopped process would never act on SIGTERM.
	p.SignalGroup(syscall.SIGCONT)
	p.SignalGroup(sig)
	select {
	case <-p.Done():
	case <-time.After(grace):
		p.Kill()
	}
}

// Kill kills the server with SIGKILL, like a crash, and waits for it to exit.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.stop(syscall.SIGKILL, 0)
}

// Stop shuts the server down with SIGTERM and waits for it to exit.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.stop(syscall.SIGTERM, 10*time.Second)
}

// Pause freezes the server with SIGSTOP: connections stay open, nothing is
// answered, as with a hung server. Resume undoes it.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	s.signal(t, syscall.SIGSTOP)
}

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	s.signal(t, syscall.SIGCONT)
}

func (s *Server) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil {
		t.Fatalf("redistest: %s: %v: server is not running", s.Addr, sig)
	}
	p.SignalGroup(sig)
}

// Start starts a killed or stopped server again on the same port and
// directory and waits until it answers. Data and scripts are gone; a cluster
// node keeps its identity (nodes.conf).
func (s *Server) Start(t testing.TB) {
	t.Helper()
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
}

// Restart kills the server (SIGKILL) and starts it again on the same port.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill(t)
	s.Start(t)
}

// Running reports whether the server process is running (it may be paused).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil
}

// Close kills the server and removes its directory. It is idempotent and is
// what cleanup calls.
func (s *Server) Close() {
	s.stop(syscall.SIGKILL, 0)
	s.mu.Lock()
	already := s.closed
	s.closed = true
	s.mu.Unlock()
	if !already {
		os.RemoveAll(s.Dir)
	}
}

// closeAll closes every server of sets in parallel, skipping nil ones
// (servers a failed start never made).
func closeAll(sets ...[]*Server) {
	var wg sync.WaitGroup
	for _, set := range sets {
		for _, n := range set {
			if n != nil {
				wg.Go(n.Close)
			}
		}
	}
	wg.Wait()
}

// Client returns a client connected to this server alone, closed at the
// end of the test.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// DBSize returns the number of keys in c's database, or fails the test.
func DBSize(t testing.TB, c *redis.Client) int64 {
	t.Helper()
	n, err := c.DBSize(context.Background()).Result()
	if err != nil {
		t.Fatalf("DBSIZE: %v", err)
	}
	return n
}

// Log returns the tail of the server's log files, for failure messages.
func (s *Server) Log() string { return s.logTail() }

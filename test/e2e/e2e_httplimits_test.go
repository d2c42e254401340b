package e2e

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cutOffBound is how long a test waits for the server to close a
// connection it was configured to close after well under a second. It is a
// liveness bound that lets a broken server fail the test instead of hanging
// it (without the limits the connections stay open for good), not a timing
// assertion: nothing checks how early the cut-off came.
const cutOffBound = 15 * time.Second

// dial opens a raw loopback connection to addr, closed at cleanup.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, callTimeout)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// send writes a raw request (or part of one) on c.
func send(t *testing.T, c net.Conn, raw string) {
	t.Helper()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// closedByServer reads c until the server closes it, within bound, and
// returns what it sent first. A reset counts as closed.
func closedByServer(c net.Conn, bound time.Duration) (string, error) {
	_ = c.SetReadDeadline(time.Now().Add(bound))
	b, err := io.ReadAll(c)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		return string(b), err
	}
	return string(b), nil
}

// healthzOn sends GET /healthz on c, reads the answer through br (within
// cutOffBound) and fails t unless it is 200. The body is drained, so c can
// carry another request.
func healthzOn(t *testing.T, c net.Conn, br *bufio.Reader) *http.Response {
	t.Helper()
	send(t, c, "GET /healthz HTTP/1.1\r\nHost: rls\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(cutOffBound))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("GET /healthz: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz: %d, want 200", resp.StatusCode)
	}
	return resp
}

// TestHTTPSlowClientsCutOff opens many connections that stall, half in
// their headers and half after one byte of body: the server closes every
// one after --http-read-timeout, /json is served meanwhile, and the
// goroutines they held are released.
func TestHTTPSlowClientsCutOff(t *testing.T) {
	t.Parallel()
	s := startShop(t, "--http-read-timeout=500ms")
	base := s.scrape().get("go_goroutines", nil)
	const slow = 150
	type stalled struct {
		c    net.Conn
		body bool // stalled in the body (else in the headers)
	}
	var conns []stalled
	for i := range slow {
		c := dial(t, s.HTTPAddr)
		if i%2 == 0 {
			send(t, c, "POST /json HTTP/1.1\r\nHost: rls\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
		} else {
			send(t, c, "GET /metrics HTTP/1.1\r\nHost: rls\r\nX-Slow: ")
		}
		conns = append(conns, stalled{c, i%2 == 0})
	}

	const free = `{"domain":"shop","descriptors":[{"entries":[{"key":"client","value":"meanwhile"}]}]}`
	for i := range 5 {
		if status, body := s.post("/json", free); status != http.StatusOK {
			t.Fatalf("/json %d with %d slow clients open: %d %q, want 200", i+1, slow, status, body)
		}
	}

	for i, st := range conns {
		got, err := closedByServer(st.c, cutOffBound)
		if err != nil {
			t.Fatalf("slow connection %d not closed by the server: %v (read %q)", i, err, got)
		}
		// A stalled body is answered (the handler was running); stalled
		// headers are just dropped.
		if st.body && !strings.HasPrefix(got, "HTTP/1.1 408 ") {
			t.Errorf("slow body %d: server sent %q before closing, want 408", i, got)
		}
	}
	s.awaitGoroutines(t, base, 10)
	s.stop()
}

// TestHTTPIdleConnectionsClosed keeps a connection alive after one request:
// the server closes it after --http-idle-timeout, long before the read
// timeout (which net/http would otherwise use for idle connections too).
func TestHTTPIdleConnectionsClosed(t *testing.T) {
	t.Parallel()
	s := startShop(t, "--http-idle-timeout=300ms", "--http-read-timeout=5m")
	c := dial(t, s.HTTPAddr)
	br := bufio.NewReader(c)
	if resp := healthzOn(t, c, br); resp.Close {
		t.Fatalf("/healthz: close=%v; want a kept-alive connection", resp.Close)
	}
	_ = c.SetReadDeadline(time.Now().Add(cutOffBound))
	if n, err := br.Read(make([]byte, 1)); err == nil || os.IsTimeout(err) {
		t.Fatalf("idle connection not closed by the server: read %d bytes, %v", n, err)
	}
	s.stop()
}

// TestHTTPMaxHeaderBytes sends a header block above --http-max-header-bytes:
// 431, while a normal request on the same server is served.
func TestHTTPMaxHeaderBytes(t *testing.T) {
	t.Parallel()
	s := startShop(t, "--http-max-header-bytes=1024")
	// net/http allows 4 KiB of slack above the limit; 16 KiB is past it.
	req, err := http.NewRequest(http.MethodGet, "http://"+s.HTTPAddr+"/healthz", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Big", strings.Repeat("b", 16<<10))
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("GET with a 16 KiB header: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("GET with a 16 KiB header and --http-max-header-bytes=1024: %d, want 431", resp.StatusCode)
	}
	if status, body := s.get("/healthz"); status != http.StatusOK {
		t.Errorf("GET /healthz with small headers: %d %q, want 200", status, body)
	}
	s.stop()
}

// TestHTTPConnectionCap holds --http-max-connections=2 idle connections and
// opens a third: it is served only once the server has closed one of the
// two (here by the idle timeout), which is an ordering, not a duration.
// Without the cap the third is served at once, while both are still open.
func TestHTTPConnectionCap(t *testing.T) {
	t.Parallel()
	s := startServer(t, serveOpts{
		ConfigDir: shopDir(t),
		// The idle timeout must outlast the test's own requests below by
		// far, or it would free a slot before the third connection comes.
		Args:        []string{"--http-max-connections=2", "--http-idle-timeout=3s"},
		NoReadyWait: true, // the probe's own connection would take a slot
	})
	held := []net.Conn{dial(t, s.HTTPAddr), dial(t, s.HTTPAddr)}
	for _, c := range held {
		healthzOn(t, c, bufio.NewReader(c)) // accepted and kept alive: a slot each
	}
	third := dial(t, s.HTTPAddr)
	healthzOn(t, third, bufio.NewReader(third))

	// The server closed one held connection before it accepted the third,
	// so its close is already readable; an open one would block to the
	// deadline.
	closed := 0
	for _, c := range held {
		_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err != nil && !os.IsTimeout(err) {
			closed++
		}
	}
	if closed == 0 {
		t.Errorf("the third connection was served while both held connections were open: the cap of 2 did not hold")
	}
	s.stop()
}

// TestHTTPFlagsRejected: bad HTTP limits stop the start with the flag named.
func TestHTTPFlagsRejected(t *testing.T) {
	t.Parallel()
	dir := shopDir(t)
	for _, flag := range []string{"--http-read-timeout=0s", "--http-idle-timeout=0s", "--http-max-header-bytes=0", "--http-max-connections=0"} {
		t.Run(flag, func(t *testing.T) {
			t.Parallel()
			name := strings.SplitN(flag, "=", 2)[0]
			stderr, code := runServeToFailure(t, nil, "serve", "--config-dir", dir, "--grpc-addr", "127.0.0.1:0",
				"--http-addr", "127.0.0.1:0", "--debug-addr", "127.0.0.1:0", flag)
			if code == 0 || !strings.Contains(stderr, name+": ") {
				t.Errorf("%s: exit %d, stderr %q; want non-zero naming %s", flag, code, stderr, name)
			}
		})
	}
}

// TestDebugAddrInUse: a debug address that cannot be bound stops the start,
// naming --debug-addr; an empty one turns the listener off.
func TestDebugAddrInUse(t *testing.T) {
	t.Parallel()
	dir := shopDir(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	stderr, code := runServeToFailure(t, nil, "serve", "--config-dir", dir, "--grpc-addr", "127.0.0.1:0",
		"--http-addr", "127.0.0.1:0", "--debug-addr", l.Addr().String())
	if code == 0 || !strings.Contains(stderr, "--debug-addr") {
		t.Errorf("debug address in use: exit %d, stderr %q; want non-zero naming --debug-addr", code, stderr)
	}

	s := startServer(t, serveOpts{ConfigDir: dir, Args: []string{"--debug-addr="}})
	if s.DebugAddr != "off" {
		t.Errorf("--debug-addr=\"\": serving line says debug_addr %q, want off", s.DebugAddr)
	}
	if status, _ := s.get("/debug/config"); status != http.StatusNotFound {
		t.Errorf("/debug/config on the HTTP address with the debug listener off: %d, want 404", status)
	}
	s.stop()
}

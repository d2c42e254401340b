package e2e

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// socketPath returns a Unix socket path in a fresh short directory: the
// kernel caps socket paths at 108 bytes, which t.TempDir's long names can
// pass.
func socketPath(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rls")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "rls.sock")
}

// listenSocket binds a Unix socket at a fresh socketPath, as another
// process would, and returns its path and listener.
func listenSocket(t *testing.T) (string, *net.UnixListener) {
	t.Helper()
	sock := socketPath(t)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	return sock, ln.(*net.UnixListener)
}

// TestUnixSocket serves gRPC on a Unix domain socket, as a sidecar Envoy
// reaches its RLS, and calls the service and the health service through a
// dialer that can only open Unix connections. A stale socket file left by
// a killed process must not stop the next start.
func TestUnixSocket(t *testing.T) {
	t.Parallel()
	// A stale socket: bound, then abandoned without unlinking.
	sock, stale := listenSocket(t)
	stale.SetUnlinkOnClose(false)
	stale.Close()

	s := startShop(t, "--grpc-addr", "unix://"+sock)
	if s.GRPCAddr != "unix://"+sock {
		t.Errorf("serving line names grpc_addr %q, want unix://%s", s.GRPCAddr, sock)
	}
	conn, err := grpc.NewClient("passthrough:///envoy-rls",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	// shopRules allow plan=free twice per 30 minutes: two OK, then OVER_LIMIT.
	var got []pb.RateLimitResponse_Code
	for range 3 {
		resp, err := pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{desc("plan", "free")}})
		if err != nil {
			t.Fatalf("ShouldRateLimit over %s: %v", sock, err)
		}
		got = append(got, resp.GetOverallCode())
	}
	want := []pb.RateLimitResponse_Code{pb.RateLimitResponse_OK, pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("codes over the socket %v, want %v", got, want)
		}
	}
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health over the socket: %v %v, want SERVING", h, err)
	}
	// The CLI dials the same address form.
	out, stderr, code := runCLI(t, nil, "check", "--addr", "unix://"+sock, "--domain", "shop", "-d", "plan=free")
	if code != 1 || !strings.Contains(out, "OVER_LIMIT") {
		t.Errorf("check over the socket: exit %d, stdout %q, stderr %q; want 1 and OVER_LIMIT", code, out, stderr)
	}
	s.stop()
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket %s left behind after a clean stop: %v", sock, err)
	}
}

// TestUnixSocketInUse refuses to take over a socket another process still
// serves on, with a message naming the flag.
func TestUnixSocketInUse(t *testing.T) {
	t.Parallel()
	sock, busy := listenSocket(t)
	defer busy.Close()
	go func() {
		for {
			c, err := busy.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	stderr, code := runServeToFailure(t, nil, "serve", "--config-dir", shopDir(t), "--grpc-addr", "unix://"+sock, "--http-addr", "127.0.0.1:0")
	if code == 0 || !strings.Contains(stderr, "--grpc-addr") || !strings.Contains(stderr, "another process") {
		t.Errorf("exit %d, stderr %q: want non-zero naming --grpc-addr and the other process", code, stderr)
	}
}

// TestMaxConnectionAge opens a raw HTTP/2 connection, as Envoy holds one,
// and requires the server to send GOAWAY and then close it once
// --grpc-max-connection-age and its grace have passed: that is what moves
// Envoy's long-lived connections onto new replicas.
func TestMaxConnectionAge(t *testing.T) {
	t.Parallel()
	s := startShop(t, "--grpc-max-connection-age", "200ms", "--grpc-max-connection-age-grace", "200ms")
	c, err := net.Dial("tcp", s.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The only deadline in this test: a liveness bound, 50 times the
	// configured age, so that a server that never closes fails the test
	// instead of hanging it. Nothing asserts on how soon the close comes.
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var frames []string
	goAway := false
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			if !goAway {
				t.Fatalf("connection ended (%v) without GOAWAY; frames %v", err, frames)
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("GOAWAY came but the connection was not closed within the bound; frames %v", frames)
			}
			return // closed by the server after GOAWAY: the age works
		}
		frames = append(frames, f.Header().Type.String())
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = fr.WritePing(true, f.Data)
			}
		case *http2.GoAwayFrame:
			goAway = true
		}
	}
}

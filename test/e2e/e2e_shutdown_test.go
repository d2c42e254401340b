package e2e

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	refpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/envoy-rls/envoy-rls/internal/testkit/eventually"
)

// openStream starts a reflection stream: an RPC that stays in flight until
// the client closes it, which makes draining observable without a slow
// backend.
func openStream(t *testing.T, s *server) refpb.ServerReflection_ServerReflectionInfoClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	t.Cleanup(cancel)
	stream, err := refpb.NewServerReflectionClient(s.grpcConn()).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatalf("reflection stream: %v", err)
	}
	listServices(t, stream) // the stream is established on the server
	return stream
}

func listServices(t *testing.T, stream refpb.ServerReflection_ServerReflectionInfoClient) {
	t.Helper()
	if err := stream.Send(&refpb.ServerReflectionRequest{MessageRequest: &refpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatalf("reflection send: %v", err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatalf("reflection recv: %v", err)
	}
	if len(resp.GetListServicesResponse().GetService()) == 0 {
		t.Fatalf("reflection: no services in %v", resp)
	}
}

// listenerClosed reports whether the gRPC port refuses connections, which
// happens when the server starts its graceful stop.
func listenerClosed(addr string) (bool, string) {
	c, err := net.DialTimeout("tcp", addr, callTimeout)
	if err != nil {
		return true, err.Error()
	}
	c.Close()
	return false, "still accepting connections"
}

// TestShutdownDrains sends SIGTERM with a shutdown delay and an RPC in
// flight: /readyz fails at once while requests are still served during the
// delay, the in-flight RPC keeps working after the listener closed, and the
// process exits 0 once it ends.
func TestShutdownDrains(t *testing.T) {
	t.Parallel()
	s := startShop(t, "--shutdown-delay=3s")
	stream := openStream(t, s)
	s.ask("shop", desc("client", "warm")) // the unary client connection is up

	s.signal(syscall.SIGTERM)
	s.awaitReadyz(t, "/readyz fails after SIGTERM", http.StatusServiceUnavailable, "")
	if _, body := s.get("/readyz"); !strings.Contains(body, "shutting down") {
		t.Errorf("/readyz body %q, want it to say it is shutting down", body)
	}
	if code, _ := s.get("/healthz"); code != 200 {
		t.Errorf("/healthz %d during the shutdown delay, want 200 (alive, just not ready)", code)
	}
	// Still served during the delay, so Envoy's in-flight traffic finishes
	// while load balancers take the replica out.
	if got := s.ask("shop", desc("client", "during-delay")).GetOverallCode(); got != pb.RateLimitResponse_OK {
		t.Errorf("request during the shutdown delay: %v, want OK", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	hr, err := healthpb.NewHealthClient(s.grpcConn()).Check(ctx, &healthpb.HealthCheckRequest{Service: rlsService})
	if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("grpc health during shutdown: %v, %v; want NOT_SERVING", hr, err)
	}

	eventually.True(t, "gRPC listener closes after the delay", func() (bool, string) { return listenerClosed(s.GRPCAddr) })
	select {
	case <-s.proc.Done():
		t.Fatalf("envoy-rls exited with an RPC still in flight; logs:\n%s", s.logs)
	default:
	}
	listServices(t, stream) // the in-flight RPC is still served
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("in-flight stream ended with %v, want a clean end (EOF)", err)
	}
	if code := s.wait(); code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	logs := s.logs.String()
	for _, msg := range []string{"shutting down: draining", "envoy-rls stopped"} {
		if !strings.Contains(logs, msg) {
			t.Errorf("logs lack %q", msg)
		}
	}
}

// TestShutdownTimeout leaves an RPC open forever: the drain is bounded by
// --shutdown-timeout, after which the process closes it and exits 0.
func TestShutdownTimeout(t *testing.T) {
	t.Parallel()
	s := startShop(t, "--shutdown-timeout=500ms")
	stream := openStream(t, s)
	s.stop()
	if !strings.Contains(s.logs.String(), "in-flight requests did not finish in time") {
		t.Errorf("logs do not say the drain timed out")
	}
	if _, err := stream.Recv(); err == nil {
		t.Errorf("stream still open after the process exited")
	}
}

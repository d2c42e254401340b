package childproc

import (
	"net"
	"strconv"
	"sync"
	"testing"
)

func TestFreePorts(t *testing.T) {
	for _, n := range []int{0, 1, 5} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			ports, err := FreePorts(n)
			if err != nil {
				t.Fatal(err)
			}
			if len(ports) != n {
				t.Fatalf("%d ports, want %d", len(ports), n)
			}
			seen := map[int]bool{}
			for _, p := range ports {
				if seen[p] {
					t.Errorf("port %d handed out twice in %v", p, ports)
				}
				seen[p] = true
				// The listeners are closed on return, so each port binds.
				l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
				if err != nil {
					t.Errorf("port %d: %v", p, err)
					continue
				}
				l.Close()
			}
		})
	}
}

func TestBufferConcurrent(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				_, _ = b.Write([]byte("x"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := len(b.String()); got != 400 {
		t.Errorf("%d bytes, want 400", got)
	}
}

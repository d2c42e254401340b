// Package redistest starts real redis-server processes for tests: a
// standalone server (optionally with TLS and client certificates), a
// 3-master Redis Cluster with one replica per master, and a Sentinel set
// (1 master, 1 replica, 3 sentinels). Every process
// listens on a free loopback port, lives in its own temporary directory and
// process group, and is killed at cleanup.
//
// The harness never skips: when redis-server or redis-cli is missing it fails
// the test (or, from TestMain, exits non-zero) and says how to install them.
//
// Two ways to use it:
//
//   - Per test: Standalone(t), Cluster(t), Sentinel(t) start a fresh set and
//     register its cleanup with t.
//   - Per test package, for heavy sets: call Main(m) from TestMain and
//     SharedStandalone(t), SharedCluster(t), SharedSentinel(t) from tests.
//     The first call starts the set, later calls reuse it, Main stops them
//     all after the tests ran. Tests sharing a server must not FLUSHDB; they
//     put KeyPrefix(t) (or a value derived from it) into every key instead.
//
// Nothing here persists data (save "" and no AOF), so a restarted server is
// empty and has an empty script cache, as after a real crash without
// persistence. This package must not be imported by non-test code.
package redistest

import (
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"
)

// ErrNoRedis is returned when redis-server or redis-cli cannot be found.
var ErrNoRedis = errors.New("redistest: redis-server/redis-cli not found (install them: apt-get install -y redis-server, or put them on PATH)")

var (
	binOnce   sync.Once
	serverBin string
	cliBin    string
	binErr    error
)

// binaries locates redis-server and redis-cli under the kit's policy
// (childproc.Tool): /usr/bin (the Debian package's location, which may be
// missing from a minimal PATH), then PATH.
func binaries() (server, cli string, err error) {
	binOnce.Do(func() {
		find := func(name string) (string, error) {
			p, err := childproc.Tool{Name: name, Pinned: []string{"/usr/bin/" + name}, Path: []string{name}}.Find()
			if err != nil {
				return "", fmt.Errorf("%w: %s", ErrNoRedis, name)
			}
			return p, nil
		}
		serverBin, binErr = find("redis-server")
		if binErr != nil {
			return
		}
		cliBin, binErr = find("redis-cli")
	})
	return serverBin, cliBin, binErr
}

// shared holds the sets started by the Shared* functions; Main stops them.
var shared struct {
	mu         sync.Mutex
	main       bool
	standalone *Server
	cluster    *ClusterSet
	sentinel   *SentinelSet
	// errors are remembered so that every test after a failed start fails
	// fast with the same cause instead of retrying a slow start.
	standaloneErr, clusterErr, sentinelErr error
}

// Main runs the package's tests and then stops every set started by a
// Shared* function. Call it from TestMain:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
//
// It exits the process with the tests' exit code, and exits non-zero before
// running anything when redis-server is missing.
func Main(m *testing.M) {
	if _, _, err := binaries(); err != nil {
		log.Fatal(err)
	}
	shared.mu.Lock()
	shared.main = true
	shared.mu.Unlock()
	code := m.Run()
	shared.mu.Lock()
	if shared.standalone != nil {
		shared.standalone.Close()
	}
	if shared.cluster != nil {
		shared.cluster.Close()
	}
	if shared.sentinel != nil {
		shared.sentinel.Close()
	}
	shared.mu.Unlock()
	os.Exit(code)
}

// sharedSet starts a shared set once; it fails t when Main was not called,
// because nothing would stop the processes then.
func sharedSet[T comparable](t testing.TB, slot *T, errSlot *error, start func() (T, error)) T {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.main {
		t.Fatal("redistest: Shared* needs TestMain to call redistest.Main(m)")
	}
	var zero T
	if *errSlot != nil {
		t.Fatalf("redistest: shared set failed to start earlier: %v", *errSlot)
	}
	if *slot == zero {
		v, err := start()
		if err != nil {
			*errSlot = err
			t.Fatal(err)
		}
		*slot = v
	}
	return *slot
}

// SharedStandalone returns the package's shared standalone server, starting
// it on first use. Requires Main in TestMain. Tests must not Stop, Kill,
// Pause or Restart it; use Standalone for that.
func SharedStandalone(t testing.TB) *Server {
	t.Helper()
	return sharedSet(t, &shared.standalone, &shared.standaloneErr, StartStandalone)
}

// SharedCluster returns the package's shared cluster, starting it on first
// use. Requires Main in TestMain. Failover helpers may be used on it: the
// cluster stays usable (3 masters owning all slots) after each of them.
func SharedCluster(t testing.TB) *ClusterSet {
	t.Helper()
	return sharedSet(t, &shared.cluster, &shared.clusterErr, StartCluster)
}

// SharedSentinel returns the package's shared Sentinel set, starting it on
// first use. Requires Main in TestMain.
func SharedSentinel(t testing.TB) *SentinelSet {
	t.Helper()
	return sharedSet(t, &shared.sentinel, &shared.sentinelErr, StartSentinel)
}

var prefixSeq atomic.Int64

// KeyPrefix returns a string unique to this test within the process (the
// test name plus a sequence number, so -count=N reruns do not see old keys),
// safe to use as a Redis key prefix or a rate-limit domain on a shared
// server. It contains no '{' or '}', so it never forms a hash tag.
func KeyPrefix(t testing.TB) string {
	name := strings.NewReplacer("{", "(", "}", ")", " ", "_").Replace(t.Name())
	return fmt.Sprintf("%s#%d:", name, prefixSeq.Add(1))
}

// startAttempts calls start until it succeeds, at most attempts times, and
// returns every failure when none did. Each attempt makes a set anew on
// fresh ports; the callers say why their kind of set may need another.
func startAttempts[T any](attempts int, start func() (T, error)) (T, error) {
	var errs []error
	for range attempts {
		v, err := start()
		if err == nil {
			return v, nil
		}
		errs = append(errs, err)
	}
	var zero T
	return zero, errors.Join(errs...)
}

// must returns what get returns, or fails t with its error.
func must[T any](t testing.TB, get func() (T, error)) T {
	t.Helper()
	v, err := get()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// serial runs a set's topology changes one at a time: a change waits for
// the set to settle, and a second one meanwhile would break that wait.
type serial struct{ mu sync.Mutex }

// do runs change alone and fails t with its error.
func (s *serial) do(t testing.TB, change func() error) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := change(); err != nil {
		t.Fatal(err)
	}
}

// startSet runs start on a new set and closes what start left running
// when it fails, so that a failed attempt leaves no process behind.
func startSet[T interface{ Close() }](set T, start func(T) error) (T, error) {
	if err := start(set); err != nil {
		set.Close()
		var zero T
		return zero, err
	}
	return set, nil
}

// startForTest starts a set for one test, fails the test if it cannot, and
// stops the set at the test's cleanup.
func startForTest[T interface{ Close() }](t testing.TB, start func() (T, error)) T {
	t.Helper()
	v, err := start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	return v
}

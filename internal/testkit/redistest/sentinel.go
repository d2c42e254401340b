package redistest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// sentinelMaster is the monitored master's name.
const sentinelMaster = "rlsmaster"

// SentinelSet is one master, one replica and three sentinels monitoring them
// with quorum 2. Three sentinels is the smallest set where a majority
// survives the loss of one; the master and replica are separate from them.
// Roles change with KillMaster, so ask Master for the current one.
type SentinelSet struct {
	// MasterName is the name the sentinels monitor the master under.
	MasterName string
	// Data are the two data nodes: Data[0] started as master, Data[1] as
	// its replica.
	Data []*Server
	// Sentinels are the three sentinel processes.
	Sentinels []*Server
	// SentinelAddrs are the addresses of Sentinels.
	SentinelAddrs []string

	changes serial
}

// StartSentinel starts a Sentinel set and waits until every sentinel knows
// the master, the replica and the other two sentinels. The caller must Close
// it. Use it from TestMain; tests use Sentinel or SharedSentinel.
func StartSentinel() (*SentinelSet, error) {
	return startAttempts(sentinelAttempts, func() (*SentinelSet, error) {
		return startSet(&SentinelSet{MasterName: sentinelMaster}, (*SentinelSet).start)
	})
}

// sentinelAttempts bounds how often StartSentinel makes a set anew.
// Sentinels find each other through hello messages; on a starved machine a
// set occasionally never completes that discovery. A fresh set on fresh
// ports is the cure, once.
const sentinelAttempts = 2

// start launches the data nodes and the sentinels and waits until they
// know each other.
func (s *SentinelSet) start() error {
	master, err := launch("sentinel-master", func(dir string, ports []int) ([]string, error) {
		return append(baseArgs(dir, ports[0]), "--repl-diskless-sync-delay", "0"), nil
	}, 1)
	if err != nil {
		return err
	}
	s.Data = append(s.Data, master)
	replica, err := launch("sentinel-replica", func(dir string, ports []int) ([]string, error) {
		return append(baseArgs(dir, ports[0]),
			"--repl-diskless-sync-delay", "0",
			"--replicaof", "127.0.0.1", strconv.Itoa(master.Port),
		), nil
	}, 1)
	if err != nil {
		return err
	}
	s.Data = append(s.Data, replica)
	// Sentinels learn the replica from the master's INFO at their first
	// contact; a synced replica makes that contact conclusive.
	if err := waitFor(func() error { return replicaSynced(replica.Addr, master.Port) }); err != nil {
		return fmt.Errorf("redistest: sentinel set: %w", err)
	}

	s.Sentinels, err = launchAll(3, "sentinel", func(dir string, ports []int) ([]string, error) {
		conf := filepath.Join(dir, "sentinel.conf")
		// Sentinel rewrites its config file, so it must be a
		// writable file, not command-line arguments alone.
		text := fmt.Sprintf(`port %d
bind 127.0.0.1
dir %s
logfile %s
daemonize no
protected-mode no
sentinel monitor %s 127.0.0.1 %d 2
sentinel down-after-milliseconds %[4]s 1500
sentinel failover-timeout %[4]s 3000
sentinel parallel-syncs %[4]s 1
`, ports[0], dir, filepath.Join(dir, "redis.log"), sentinelMaster, master.Port)
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			return nil, err
		}
		return []string{conf, "--sentinel"}, nil
	}, 1)
	if err != nil {
		return fmt.Errorf("redistest: sentinel set: %w", err)
	}
	s.SentinelAddrs = addrs(s.Sentinels)
	return s.waitStable(master, true)
}

// Sentinel starts a Sentinel set for this test and stops it at cleanup.
func Sentinel(t testing.TB) *SentinelSet {
	t.Helper()
	return startForTest(t, StartSentinel)
}

// Close kills every process. It is idempotent.
func (s *SentinelSet) Close() { closeAll(s.Data, s.Sentinels) }

// FailoverClient returns a Sentinel-backed client for the master, closed at
// the end of the test.
func (s *SentinelSet) FailoverClient(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.SentinelAddrs})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Master returns the data node the sentinels currently name as master.
func (s *SentinelSet) Master(t testing.TB) *Server {
	t.Helper()
	return must(t, s.master)
}

// KillMaster kills the current master (SIGKILL) and waits until every
// sentinel names the replica as master and the replica has taken the role.
// It returns the killed node and the new master. The set has no replica
// until Rejoin(killed).
func (s *SentinelSet) KillMaster(t testing.TB) (killed, promoted *Server) {
	t.Helper()
	s.changes.do(t, func() error {
		var err error
		if killed, err = s.master(); err != nil {
			return err
		}
		promoted = s.other(killed)
		killed.Kill(t)
		return s.waitStable(promoted, false)
	})
	return killed, promoted
}

// Rejoin starts a killed data node again as a replica of the current master
// and waits until it is in sync and every sentinel lists it as a replica.
func (s *SentinelSet) Rejoin(t testing.TB, node *Server) {
	t.Helper()
	s.changes.do(t, func() error {
		master := s.other(node)
		node.Start(t)
		// The sentinels would reconfigure it too, but only at their next
		// INFO round (up to 10 s); telling it directly is quicker and
		// equivalent.
		if err := command(node.Addr, "REPLICAOF", "127.0.0.1", strconv.Itoa(master.Port)); err != nil {
			return err
		}
		// On a starved machine the sentinels may fail over once more (a
		// slow PING looks like a dead master); any healthy master will do.
		err := waitFor(func() error {
			m, err := s.master()
			if err != nil {
				return err
			}
			return s.stable(m, true)
		})
		if err != nil {
			return fmt.Errorf("redistest: sentinel set did not settle: %w\n%s", err, s.diagnose())
		}
		return nil
	})
}

func (s *SentinelSet) other(n *Server) *Server {
	if n == s.Data[0] {
		return s.Data[1]
	}
	return s.Data[0]
}

// master asks the running sentinels for the master's address.
func (s *SentinelSet) master() (*Server, error) {
	var last error
	for _, sn := range s.Sentinels {
		if !sn.Running() {
			continue
		}
		m, err := s.masterOf(sn)
		if err == nil {
			return m, nil
		}
		last = err
	}
	return nil, fmt.Errorf("redistest: no sentinel answered: %v", last)
}

// masterOf returns the data node sentinel sn names as master.
func (s *SentinelSet) masterOf(sn *Server) (*Server, error) {
	v, err := do(sn.Addr, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName)
	if err != nil {
		return nil, err
	}
	hp, ok := v.([]any)
	if !ok || len(hp) != 2 {
		return nil, fmt.Errorf("redistest: sentinel %s: GET-MASTER-ADDR-BY-NAME answered %v", sn.Addr, v)
	}
	for _, d := range s.Data {
		if fmt.Sprint(hp[1]) == strconv.Itoa(d.Port) {
			return d, nil
		}
	}
	return nil, fmt.Errorf("redistest: sentinel %s names unknown master %v", sn.Addr, hp)
}

// waitStable waits until every running sentinel names master, sees it
// healthy and knows the two other sentinels, master has the master role, and
// with replica also the other data node is an in-sync replica every sentinel
// lists as healthy.
func (s *SentinelSet) waitStable(master *Server, replica bool) error {
	err := waitFor(func() error { return s.stable(master, replica) })
	if err != nil {
		return fmt.Errorf("redistest: sentinel set did not settle: %w\n%s", err, s.diagnose())
	}
	return nil
}

// stable is one check of the waitStable condition.
func (s *SentinelSet) stable(master *Server, replica bool) error {
	if err := hasRole(master.Addr, "role:master"); err != nil {
		return err
	}
	other := s.other(master)
	if replica {
		if err := replicaSynced(other.Addr, master.Port); err != nil {
			return err
		}
	}
	for _, sn := range s.Sentinels {
		if !sn.Running() {
			continue
		}
		m, err := s.masterOf(sn)
		if err != nil {
			return err
		}
		if m != master {
			return fmt.Errorf("sentinel %s names %s as master, want %s", sn.Addr, m.Addr, master.Addr)
		}
		fields, err := sentinelFields(sn.Addr, "MASTER", s.MasterName)
		if err != nil {
			return err
		}
		if fields["flags"] != "master" || fields["num-other-sentinels"] != "2" {
			return fmt.Errorf("sentinel %s: master flags=%q num-other-sentinels=%q", sn.Addr, fields["flags"], fields["num-other-sentinels"])
		}
		if !replica {
			continue
		}
		v, err := do(sn.Addr, "SENTINEL", "REPLICAS", s.MasterName)
		if err != nil {
			return err
		}
		ok := false
		list, _ := v.([]any)
		for _, r := range list {
			f := pairs(r)
			if f["port"] == strconv.Itoa(other.Port) && f["flags"] == "slave" && f["master-link-status"] == "ok" {
				ok = true
			}
		}
		if !ok {
			return fmt.Errorf("sentinel %s does not list %s as a healthy replica: %v", sn.Addr, other.Addr, v)
		}
	}
	return nil
}

// diagnose describes the set's processes for a failure message.
func (s *SentinelSet) diagnose() string {
	var b strings.Builder
	for _, n := range append(append([]*Server(nil), s.Data...), s.Sentinels...) {
		if n == nil {
			continue
		}
		fmt.Fprintf(&b, "=== %s running=%v\n", n.Addr, n.Running())
		if n.Running() {
			if info, err := commandString(n.Addr, "INFO", "replication"); err == nil {
				b.WriteString(info)
			}
		}
		b.WriteString(n.Log())
	}
	return b.String()
}

func sentinelFields(addr string, args ...any) (map[string]string, error) {
	v, err := do(addr, append([]any{"SENTINEL"}, args...)...)
	if err != nil {
		return nil, err
	}
	return pairs(v), nil
}

// pairs turns a RESP2 flat field/value array into a map.
func pairs(v any) map[string]string {
	list, _ := v.([]any)
	m := make(map[string]string, len(list)/2)
	for i := 0; i+1 < len(list); i += 2 {
		m[fmt.Sprint(list[i])] = fmt.Sprint(list[i+1])
	}
	return m
}

func hasRole(addr, role string) error {
	info, err := commandString(addr, "INFO", "replication")
	if err != nil {
		return err
	}
	if !strings.Contains(info, role+"\r\n") {
		return fmt.Errorf("%s: no %s", addr, role)
	}
	return nil
}

func replicaSynced(addr string, masterPort int) error {
	info, err := commandString(addr, "INFO", "replication")
	if err != nil {
		return err
	}
	if !strings.Contains(info, "role:slave\r\n") ||
		!strings.Contains(info, "master_port:"+strconv.Itoa(masterPort)+"\r\n") ||
		!strings.Contains(info, "master_link_status:up\r\n") {
		return fmt.Errorf("%s: not an in-sync replica of port %d", addr, masterPort)
	}
	return nil
}

// waitFor polls cond until it returns nil or topologyTimeout passes.
func waitFor(cond func() error) error {
	deadline := time.Now().Add(topologyTimeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", topologyTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

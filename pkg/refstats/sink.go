package refstats

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
)

// The sink's bounds. A flush (the periodic one and the last, at shutdown)
// dials for at most dialTimeout and writes for at most writeTimeout, so
// that it ends within flushBudget whatever the statsd server does; what
// is buffered between flushes is bounded by maxBuffered, beyond which
// stats are dropped (and counted in the next warning), as gostats's own
// sink drops them when its queue is full.
const (
	flushBudget  = 800 * time.Millisecond
	dialTimeout  = flushBudget / 2
	writeTimeout = flushBudget / 2
	maxBuffered  = 1 << 20
	// udpPacket is the largest datagram sent: gostats's, which keeps a
	// datagram within a 1500-byte MTU.
	udpPacket = 1432
)

// sink is the statsd sink of a Sender's gostats store: it writes what the
// store and the timer give it in gostats's wire format ("name:value|c",
// "|g", "|ms", one per line), buffered until Flush, which sends the
// buffer on the calling goroutine. It starts no goroutine, so nothing of
// it outlives Run: gostats's own net sink runs a connection goroutine that
// no call ends, and its Flush waits for that goroutine's reconnection
// attempts. It is safe for concurrent use.
type sink struct {
	network, addr string
	log           *zap.Logger

	mu      sync.Mutex
	buf     []byte
	dropped int

	// connMu serializes flushes, which own conn and out.
	connMu sync.Mutex
	conn   net.Conn
	out    []byte
}

func newSink(network, addr string, log *zap.Logger) *sink {
	return &sink{network: network, addr: addr, log: log}
}

func (s *sink) FlushCounter(name string, value uint64) { s.line(name, "|c\n", value, 0, true) }
func (s *sink) FlushGauge(name string, value uint64)   { s.line(name, "|g\n", value, 0, true) }

// FlushTimer writes an integral value as an integer, as gostats does.
func (s *sink) FlushTimer(name string, value float64) {
	if 0 <= value && value < math.MaxUint64 && math.Trunc(value) == value {
		s.line(name, "|ms\n", uint64(value), 0, true)
		return
	}
	s.line(name, "|ms\n", 0, value, false)
}

func (s *sink) line(name, suffix string, u uint64, f float64, integer bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.buf)+len(name)+len(suffix)+24 > maxBuffered {
		s.dropped++
		return
	}
	s.buf = append(s.buf, name...)
	s.buf = append(s.buf, ':')
	if integer {
		s.buf = strconv.AppendUint(s.buf, u, 10)
	} else {
		s.buf = strconv.AppendFloat(s.buf, f, 'f', 6, 64)
	}
	s.buf = append(s.buf, suffix...)
}

// Flush sends what is buffered, dialing first when there is no
// connection. On failure the stats are dropped and the connection closed,
// to be dialed again at the next flush.
func (s *sink) Flush() {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	s.mu.Lock()
	s.out, s.buf = s.buf, s.out[:0]
	dropped := s.dropped
	s.dropped = 0
	s.mu.Unlock()
	if dropped > 0 {
		s.log.Warn("statsd stats dropped: the buffer was full", zap.Int("stats", dropped))
	}
	if len(s.out) == 0 {
		return
	}
	if err := s.send(s.out); err != nil {
		s.log.Warn("statsd flush failed; its stats are dropped", zap.String("addr", s.addr), zap.Error(err))
		if s.conn != nil {
			_ = s.conn.Close()
			s.conn = nil
		}
	}
}

func (s *sink) send(b []byte) error {
	if s.conn == nil {
		c, err := net.DialTimeout(s.network, s.addr, dialTimeout)
		if err != nil {
			return fmt.Errorf("refstats: dial statsd: %w", err)
		}
		s.conn = c
	}
	if err := s.conn.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return fmt.Errorf("refstats: write to statsd: %w", err)
	}
	for len(b) > 0 {
		n := len(b)
		if s.network == "udp" && n > udpPacket {
			// Whole lines per datagram.
			n = udpPacket
			for n > 0 && b[n-1] != '\n' {
				n--
			}
			if n == 0 {
				return errors.New("refstats: a stat line is longer than a datagram")
			}
		}
		if _, err := s.conn.Write(b[:n]); err != nil {
			return fmt.Errorf("refstats: write to statsd: %w", err)
		}
		b = b[n:]
	}
	return nil
}

// close closes the connection.
func (s *sink) close() {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if s.conn != nil {
		_ = s.conn.Close()
		s.conn = nil
	}
}

// Package promtest starts, for tests, a real Prometheus server (Debian's
// `prometheus` package) on a free loopback port with its own config and
// storage directory, scraping exporters the test serves on loopback
// (Gauge). It fails, never skips, when the prometheus binary is missing.
// It must not be imported by non-test code, and it never touches a
// Prometheus it did not start.
package promtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"
)

// startTimeout bounds how long a start may take on a loaded machine; it
// only keeps a broken setup from hanging the test.
const startTimeout = 60 * time.Second

// Server is one running Prometheus.
type Server struct {
	// URL is its base URL, http://127.0.0.1:port.
	URL string

	proc *childproc.Proc
	logs *childproc.Buffer
	once sync.Once
}

// Binary returns the prometheus binary: $PROMETHEUS_BIN, else prometheus
// on PATH, else /usr/bin/prometheus.
func Binary() (string, error) {
	return childproc.Tool{
		Name:    "promtest: prometheus",
		Env:     "PROMETHEUS_BIN",
		Pinned:  []string{"/usr/bin/prometheus"},
		Path:    []string{"prometheus"},
		Install: "install the Debian package prometheus: make test-deps",
	}.Find()
}

// Start runs Prometheus scraping targets (host:port of /metrics
// endpoints) every second, waits until it is ready, and stops it at the
// test's cleanup. A start that fails (a port taken between choosing and
// binding it) is retried on another port.
func Start(t testing.TB, targets ...string) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	var errs []error
	for range 3 {
		s, err := start(t, bin, targets)
		if err == nil {
			t.Cleanup(s.Stop)
			return s
		}
		errs = append(errs, err)
	}
	t.Fatal(errors.Join(errs...))
	return nil
}

func start(t testing.TB, bin string, targets []string) (*Server, error) {
	dir := t.TempDir()
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = strconv.Quote(tg)
	}
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: test\n    static_configs:\n      - targets: [%s]\n", strings.Join(quoted, ", "))
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	port, err := childproc.FreePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	s := &Server{URL: "http://" + addr, logs: &childproc.Buffer{}}
	cmd := exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = s.logs, s.logs
	if s.proc, err = childproc.Start(cmd); err != nil {
		return nil, fmt.Errorf("promtest: start %s: %w", bin, err)
	}
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-s.proc.Done():
			return nil, fmt.Errorf("promtest: prometheus exited at start:\n%s", s.logs.String())
		default:
		}
		if resp, err := http.Get(s.URL + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("promtest: prometheus not ready within %v:\n%s", startTimeout, s.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop kills the server and waits for it; it is idempotent.
func (s *Server) Stop() {
	s.once.Do(s.proc.Kill)
}

// Query evaluates q now and returns its single value; ok is false when the
// result is empty, has several series, or the query fails.
func (s *Server) Query(q string) (v float64, ok bool) {
	resp, err := http.Get(s.URL + "/api/v1/query?" + url.Values{"query": {q}}.Encode())
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	b, _ := io.ReadAll(resp.Body)
	if json.Unmarshal(b, &r) != nil || len(r.Data.Result) != 1 {
		return 0, false
	}
	str, _ := r.Data.Result[0].Value[1].(string)
	v, err = strconv.ParseFloat(str, 64)
	return v, err == nil
}

// Gauge is an exporter serving one gauge on a loopback port, whose value
// the test sets.
type Gauge struct {
	// Addr is host:port for a scrape target.
	Addr string
	name string
	bits atomic.Uint64
}

// NewGauge serves the gauge name (value 0) until the test's cleanup.
func NewGauge(t testing.TB, name string) *Gauge {
	t.Helper()
	g := &Gauge{name: name}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintf(w, "# TYPE %s gauge\n%s %s\n", g.name, g.name, strconv.FormatFloat(g.Value(), 'g', -1, 64))
	}))
	t.Cleanup(srv.Close)
	g.Addr = srv.Listener.Addr().String()
	return g
}

// Set sets the gauge's value.
func (g *Gauge) Set(v float64) { g.bits.Store(math.Float64bits(v)) }

// Value returns the gauge's value.
func (g *Gauge) Value() float64 { return math.Float64frombits(g.bits.Load()) }

// AwaitValue waits until Prometheus's latest sample of the gauge is v, so
// that what a test asserts next is judged on it; the bound only keeps a
// broken setup from hanging.
func (s *Server) AwaitValue(t testing.TB, g *Gauge, v float64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for {
		if got, ok := s.Query(g.name); ok && got == v {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("promtest: %s did not reach %v in Prometheus within %v", g.name, v, startTimeout)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

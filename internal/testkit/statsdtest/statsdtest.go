// Package statsdtest starts, for tests, a real prometheus/statsd_exporter
// (installed pinned by `make test-deps` into bin/tools) on free loopback
// ports, with a mapping config, and reads back the Prometheus metrics it
// made of the statsd lines it received. EnvoyGatewayMapping is Envoy
// Gateway's own mapping, so a test sees what that sidecar exports. It
// fails, never skips, when the binary is missing. It must not be imported
// by non-test code.
package statsdtest

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	dto "github.com/prometheus/client_model/go"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"
)

// startTimeout only keeps a broken setup from hanging a test.
const startTimeout = 30 * time.Second

// EnvoyGatewayMapping is the path of Envoy Gateway's mapping config.
func EnvoyGatewayMapping() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "testdata", "envoy-gateway.yaml")
}

// NoMapping is the path of an empty mapping config: every stat keeps
// its escaped name.
func NoMapping() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "testdata", "none.yaml")
}

// Binary returns the statsd_exporter binary: $STATSD_EXPORTER_BIN, else
// bin/tools/statsd_exporter of this module (make test-deps), else one on
// PATH.
func Binary() (string, error) {
	return childproc.Tool{
		Name:    "statsdtest: statsd_exporter",
		Env:     "STATSD_EXPORTER_BIN",
		Pinned:  []string{"bin/tools/statsd_exporter"},
		Path:    []string{"statsd_exporter"},
		Install: "run make test-deps",
	}.Find()
}

// Exporter is one running statsd_exporter.
type Exporter struct {
	// StatsdPort takes statsd lines over TCP and UDP on 127.0.0.1.
	StatsdPort int
	// MetricsURL is its /metrics.
	MetricsURL string

	logs *childproc.Buffer
}

// Start runs statsd_exporter with the mapping config file, stopped at the
// end of the test.
func Start(t *testing.T, mapping string) *Exporter {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	mapping = renameTimerType(t, mapping)
	ports, err := childproc.FreePorts(2)
	if err != nil {
		t.Fatalf("statsdtest: %v", err)
	}
	statsd := "127.0.0.1:" + strconv.Itoa(ports[0])
	web := "127.0.0.1:" + strconv.Itoa(ports[1])
	e := &Exporter{StatsdPort: ports[0], MetricsURL: "http://" + web + "/metrics", logs: &childproc.Buffer{}}
	cmd := exec.Command(bin, "--web.listen-address="+web, "--statsd.listen-tcp="+statsd,
		"--statsd.listen-udp="+statsd, "--statsd.mapping-config="+mapping, "--log.level=debug")
	cmd.Stdout, cmd.Stderr = e.logs, e.logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("statsdtest: start %s: %v", bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("statsd_exporter logs:\n%s", e.logs)
		}
	})
	deadline := time.Now().Add(startTimeout)
	for {
		if _, err := e.scrape(); err == nil {
			return e
		}
		select {
		case <-done:
			t.Fatalf("statsdtest: statsd_exporter exited; logs:\n%s", e.logs)
		case <-time.After(25 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("statsdtest: statsd_exporter not serving within %v; logs:\n%s", startTimeout, e.logs)
		}
	}
}

// renameTimerType writes a copy of the mapping file with its timer_type
// fields renamed observer_type and returns its path. Envoy Gateway's
// mapping was written for the statsd_exporter it pins (v0.18.0); later
// releases, v0.31.0 among them, renamed the field and refuse the old name.
// Its value (histogram) is the same under either name.
func renameTimerType(t *testing.T, mapping string) string {
	t.Helper()
	data, err := os.ReadFile(mapping)
	if err != nil {
		t.Fatalf("statsdtest: %v", err)
	}
	out := filepath.Join(t.TempDir(), filepath.Base(mapping))
	renamed := strings.ReplaceAll(string(data), "\n    timer_type:", "\n    observer_type:")
	if err := os.WriteFile(out, []byte(renamed), 0o644); err != nil {
		t.Fatalf("statsdtest: %v", err)
	}
	return out
}

func (e *Exporter) scrape() (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get(e.MetricsURL)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("statsdtest: GET %s: %d %s", e.MetricsURL, resp.StatusCode, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// Value is the value of the series name{labels} (a counter's, or a
// histogram's sample count), and whether it exists. labels must name
// every label of the series.
func (e *Exporter) Value(t *testing.T, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	fams, err := e.scrape()
	if err != nil {
		t.Fatal(err)
	}
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		if !sameLabels(m.GetLabel(), labels) {
			continue
		}
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue(), true
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// Names lists the metric families exposed, for failure messages.
func (e *Exporter) Names(t *testing.T) string {
	t.Helper()
	fams, err := e.scrape()
	if err != nil {
		return err.Error()
	}
	var names []string
	for n := range fams {
		if !strings.HasPrefix(n, "go_") && !strings.HasPrefix(n, "process_") && !strings.HasPrefix(n, "statsd_exporter_") {
			names = append(names, n)
		}
	}
	return strings.Join(names, " ")
}

func sameLabels(got []*dto.LabelPair, want map[string]string) bool {
	if len(got) != len(want) {
		return false
	}
	for _, l := range got {
		if v, ok := want[l.GetName()]; !ok || v != l.GetValue() {
			return false
		}
	}
	return true
}

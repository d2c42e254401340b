package istio

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"
)

// IstioVersion is the istio.io/istio snapshot the Makefile's ISTIO_VERSION
// builds (VERSION 1.31); proxies announce istioRelease.
const (
	IstioVersion = "v0.0.0-20260827124520-eed52ebb66ad"
	istioRelease = "1.31.0"
	// clusterID is istiod's --clusterID; the proxies' CLUSTER_ID matches it.
	clusterID = "Kubernetes"
	// rootNamespace is the mesh's config root namespace.
	rootNamespace = "istio-system"
)

// Bounds that only keep a broken setup from hanging a test; nothing
// asserts on durations.
const (
	istiodStartTimeout = 90 * time.Second
	pushTimeout        = 60 * time.Second
)

// istiodBinary returns pilot-discovery: $ISTIOD_BIN, else the one `make
// test-deps` built into bin/tools/istiod-<IstioVersion>.
func istiodBinary() (string, error) {
	if p := os.Getenv("ISTIOD_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("istio: ISTIOD_BIN=%s: %w", p, err)
		}
		return p, nil
	}
	_, file, _, _ := runtime.Caller(0)
	p := filepath.Join(filepath.Dir(file), "..", "..", "bin", "tools", "istiod-"+IstioVersion, "pilot-discovery")
	if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("istio: istiod (pilot-discovery %s) not found at %s: run make test-deps (or make istiod), or set ISTIOD_BIN", IstioVersion, p)
	}
	return p, nil
}

// meshConfig is istiod's --meshConfig: mTLS off (no CA runs, and sidecar
// inbound listeners would wait for SDS secrets forever; the config
// directory also holds a mesh-wide PeerAuthentication DISABLE), and the
// default root namespace.
const meshConfig = `rootNamespace: istio-system
trustDomain: cluster.local
enableAutoMtls: false
`

// istiod is one running pilot-discovery serving plaintext xDS from files.
type istiod struct {
	GRPCAddr string
	// DebugURL serves /debug/syncz and the other debug handlers.
	DebugURL string
	Logs     *childproc.Buffer

	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// errRefused is istiod refusing its config directory: it exits at start,
// as a cluster's validating webhook would refuse the kubectl apply.
var errRefused = errors.New("istiod refused the config directory and exited")

// startIstiod runs istiod on configDir and waits until its debug
// endpoint answers. It is stopped at cleanup; its log is printed when the
// test failed. When istiod exits at start because of the config, the error
// wraps errRefused and carries istiod's own words.
func startIstiod(t *testing.T, configDir string) (*istiod, error) {
	t.Helper()
	bin, err := istiodBinary()
	if err != nil {
		t.Fatal(err)
	}
	ports, err := childproc.FreePorts(5)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mesh := filepath.Join(dir, "mesh.yaml")
	if err := os.WriteFile(mesh, []byte(meshConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	d := &istiod{GRPCAddr: addr(0), DebugURL: "http://" + addr(1), Logs: &childproc.Buffer{}, done: make(chan struct{})}
	d.cmd = exec.Command(bin, "discovery",
		"--registries=", "--configDir="+configDir, "--meshConfig="+mesh,
		"--networksConfig="+filepath.Join(dir, "no-mesh-networks"),
		"--clusterID="+clusterID, "--domain=cluster.local",
		"--namespace="+rootNamespace,
		"--grpcAddr="+d.GRPCAddr, "--httpAddr="+addr(1), "--monitoringAddr="+addr(2),
		"--secureGRPCAddr=", "--httpsAddr=",
		"--ctrlz_address=127.0.0.1", "--ctrlz_port="+strconv.Itoa(ports[3]),
		"--shutdownDuration=1s", "--log_output_level=default:info")
	d.cmd.Env = append(os.Environ(),
		// No CA, no certificates: plaintext xDS only.
		"PILOT_CERT_PROVIDER=none", "ENABLE_CA_SERVER=false",
		// istio-proxy's own extensions, which a vanilla Envoy rejects.
		"PILOT_ENABLE_METADATA_EXCHANGE=false", "PILOT_ENABLE_ALPN_FILTER=false",
		"POD_NAMESPACE="+rootNamespace, "POD_NAME=istiod-test",
		"REVISION=default", "PILOT_ENABLE_GATEWAY_API=false",
		"INJECTION_WEBHOOK_CONFIG_NAME=", "VALIDATION_WEBHOOK_CONFIG_NAME=",
		"PILOT_ENABLE_ANALYSIS=false", "CLUSTER_ID="+clusterID)
	d.cmd.Dir = dir
	d.cmd.Stdout, d.cmd.Stderr = d.Logs, d.Logs
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start istiod %s: %v", bin, err)
	}
	go func() { d.err = d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		d.stop()
		if t.Failed() {
			t.Logf("istiod log (last lines):\n%s", lastLines(d.Logs.String(), 60))
		}
	})
	deadline := time.Now().Add(istiodStartTimeout)
	for {
		select {
		case <-d.done:
			var why []string
			for _, l := range strings.Split(d.Logs.String(), "\n") {
				if strings.HasPrefix(l, "Error: ") {
					why = append(why, strings.TrimPrefix(l, "Error: "))
				}
			}
			if len(why) == 0 {
				t.Fatalf("istiod exited before it served (%v); log:\n%s", d.err, lastLines(d.Logs.String(), 60))
			}
			return nil, fmt.Errorf("%w (%v): %s", errRefused, d.err, strings.Join(why, "; "))
		case <-time.After(100 * time.Millisecond):
		}
		// /ready stays 503 without Kubernetes webhooks; syncz answers once
		// the xDS server runs.
		if _, err := d.syncz(); err == nil {
			return d, nil
		}
		if time.Now().After(deadline) {
			t.Fatalf("istiod's %s/debug/syncz did not answer within %v; log:\n%s", d.DebugURL, istiodStartTimeout, lastLines(d.Logs.String(), 60))
		}
	}
}

func (d *istiod) stop() {
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-d.done
	}
}

// syncStatus is one proxy's entry of istiod's /debug/syncz: per xDS type,
// the nonce istiod last sent and the one the proxy last acknowledged, and
// the proxy's last rejection (NACK) message.
type syncStatus struct {
	Proxy        string                    `json:"proxy"`
	IstioVersion string                    `json:"istio_version"`
	Resources    map[string]resourceStatus `json:"resources"`
}

type resourceStatus struct {
	Sent      string `json:"sent"`
	Acked     string `json:"acked"`
	LastError string `json:"lastError"`
}

func (d *istiod) syncz() ([]syncStatus, error) {
	resp, err := http.Get(d.DebugURL + "/debug/syncz")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("istiod /debug/syncz: %s: %s", resp.Status, b)
	}
	var out []syncStatus
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("istiod /debug/syncz: %w: %s", err, b)
	}
	return out, nil
}

// synced reports, for one proxy, whether istiod sent it listeners,
// clusters and routes and every type it sent is acknowledged, and else why
// not, in istiod's words (a NACK carries Envoy's rejection message).
func (d *istiod) synced(proxyID string) (bool, string) {
	// istiod names a proxy POD.NAMESPACE, the node id's third part.
	if parts := strings.Split(proxyID, "~"); len(parts) == 4 {
		proxyID = parts[2]
	}
	all, err := d.syncz()
	if err != nil {
		return false, err.Error()
	}
	for _, s := range all {
		if s.Proxy != proxyID {
			continue
		}
		var why []string
		types := make([]string, 0, len(s.Resources))
		for typ := range s.Resources {
			types = append(types, typ)
		}
		sort.Strings(types)
		for _, typ := range types {
			r := s.Resources[typ]
			short := typ[strings.LastIndex(typ, ".")+1:]
			switch {
			case r.LastError != "":
				why = append(why, fmt.Sprintf("%s rejected by the proxy (NACK, sent %s, acked %s): %s", short, r.Sent, r.Acked, r.LastError))
			case r.Sent != r.Acked:
				why = append(why, fmt.Sprintf("%s sent %s, acked %s", short, r.Sent, r.Acked))
			}
		}
		for _, want := range []string{"type.googleapis.com/envoy.config.listener.v3.Listener", "type.googleapis.com/envoy.config.cluster.v3.Cluster"} {
			if s.Resources[want].Sent == "" {
				why = append(why, want[strings.LastIndex(want, ".")+1:]+" not sent yet")
			}
		}
		if len(why) > 0 {
			return false, strings.Join(why, "; ")
		}
		return true, "sent = acked for " + strings.Join(types, ", ")
	}
	return false, fmt.Sprintf("proxy %s is not connected to istiod", proxyID)
}

// ackErrors returns istiod's log lines that report a proxy's rejection.
func (d *istiod) ackErrors() []string {
	var out []string
	for _, l := range strings.Split(d.Logs.String(), "\n") {
		if strings.Contains(l, "ACK ERROR") {
			out = append(out, l)
		}
	}
	return out
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"

	"sigs.k8s.io/yaml"

	"github.com/envoy-rls/envoy-rls/internal/testkit/envoytest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/testcert"
)

// tlsFiles are the PEM files of one mTLS setup: a CA, envoy-rls's server
// certificate and Envoy's client certificate, both signed by it.
type tlsFiles struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
}

func writeTLSFiles(t testing.TB) tlsFiles {
	t.Helper()
	ca, err := testcert.NewCA("envoy-rls test CA")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	f := tlsFiles{
		CA:         filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
	}
	write := func(path string, b []byte) {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(f.CA, ca.PEM)
	for _, leaf := range []struct {
		cert, key string
		server    bool
	}{{f.ServerCert, f.ServerKey, true}, {f.ClientCert, f.ClientKey, false}} {
		c, k, err := ca.Issue("envoy-rls test", 2, leaf.server)
		if err != nil {
			t.Fatal(err)
		}
		write(leaf.cert, c)
		write(leaf.key, k)
	}
	return f
}

// upstreamTLS is the transport socket of Envoy's envoy_rls cluster for TLS
// to envoy-rls, as docs/deploying.md shows it ("TLS to envoy-rls"), with
// the test's files and name: it verifies envoy-rls's certificate against
// the CA, and presents the client certificate when withCert. The snippet
// names no alpn_protocols: gRPC servers refuse a TLS client that offers
// no ALPN, and Envoy offers h2 by itself on a cluster set up for HTTP/2.
func upstreamTLS(t testing.TB, f tlsFiles, withCert bool) map[string]any {
	t.Helper()
	doc := string(childproc.ReadRepoFile(t, "docs/deploying.md"))
	_, after, ok := strings.Cut(doc, "**TLS to envoy-rls.**")
	if !ok {
		t.Fatal(`docs/deploying.md has no "TLS to envoy-rls" bullet`)
	}
	_, after, ok = strings.Cut(after, "```yaml\n")
	block, _, ok2 := strings.Cut(after, "```")
	if !ok || !ok2 {
		t.Fatal(`docs/deploying.md's "TLS to envoy-rls" has no yaml block`)
	}
	block = strings.NewReplacer(
		"/etc/envoy/tls/client.pem", f.ClientCert, "/etc/envoy/tls/client-key.pem", f.ClientKey,
		"/etc/envoy/tls/ca.pem", f.CA, "envoy-rls", "localhost").Replace(block)
	var snippet struct {
		TransportSocket map[string]any `json:"transport_socket"`
	}
	if err := yaml.Unmarshal([]byte(dedent(block)), &snippet); err != nil || snippet.TransportSocket == nil {
		t.Fatalf("docs/deploying.md's TLS snippet: %v; want a transport_socket in\n%s", err, block)
	}
	if !withCert {
		delete(bootstrapPath(t, snippet.TransportSocket, "typed_config", "common_tls_context"), "tls_certificates")
	}
	return snippet.TransportSocket
}

// dedent removes the indentation of a block's first line from every line.
func dedent(block string) string {
	indent := len(block) - len(strings.TrimLeft(block, " "))
	lines := strings.Split(block, "\n")
	for i, l := range lines {
		if len(l) >= indent && strings.TrimSpace(l[:indent]) == "" {
			lines[i] = l[indent:]
		}
	}
	return strings.Join(lines, "\n")
}

// TestEnvoyToRLSOverMTLS: envoy-rls serves gRPC with --grpc-tls-cert/-key
// and --grpc-tls-client-ca; Envoy's envoy_rls cluster with an
// UpstreamTlsContext presenting a client certificate gets its decisions
// (the login limit holds, no ratelimit.error). Envoy without the client
// certificate, or in plaintext, is refused: every call is a
// ratelimit.error, and the shipped fail-open lets the logins through.
func TestEnvoyToRLSOverMTLS(t *testing.T) {
	for _, st := range stores {
		for _, tc := range []struct {
			name      string
			transport func(*testing.T, tlsFiles) map[string]any // nil: plaintext
			decides   bool
		}{
			{"mTLS", func(t *testing.T, f tlsFiles) map[string]any { return upstreamTLS(t, f, true) }, true},
			{"TLS without a client certificate", func(t *testing.T, f tlsFiles) map[string]any { return upstreamTLS(t, f, false) }, false},
			{"plaintext", nil, false},
		} {
			t.Run(string(st)+"/"+tc.name, func(t *testing.T) {
				f := writeTLSFiles(t)
				doc := shippedBootstrap(t)
				patient(rateLimitFilter(t, doc))
				if tc.transport != nil {
					cluster(t, doc, "envoy_rls")["transport_socket"] = tc.transport(t, f)
				}
				s := startStack(t, stackOpts{Store: st, Bootstrap: encodeBootstrap(t, doc),
					ServeArgs: []string{"--grpc-tls-cert", f.ServerCert, "--grpc-tls-key", f.ServerKey, "--grpc-tls-client-ca", f.CA}})
				before := s.envoyCounters(t, rlOK, rlError)
				got := s.loginSequence(t, "127.0.0.33")
				d := since(before, s.envoyCounters(t, rlOK, rlError))
				if tc.decides {
					if got != loginsLimited || d[rlError] != 0 || d[rlOK] != 5 {
						t.Errorf("logins %s, ratelimit.ok +%d, ratelimit.error +%d; want %s, 5 and 0", got, d[rlOK], d[rlError], loginsLimited)
					}
					return
				}
				if want := "[200 200 200 200 200 200]"; got != want || d[rlError] != 6 || d[rlOK] != 0 {
					t.Errorf("logins %s, ratelimit.ok +%d, ratelimit.error +%d; want %s (refused, failing open), 0 and 6", got, d[rlOK], d[rlError], want)
				}
			})
		}
	}
}

// udsCase is one way to point Envoy's rate-limit filter at envoy-rls's
// socket: edit changes the bootstrap.
type udsCase struct {
	name string
	edit func(t *testing.T, doc map[string]any)
}

// TestEnvoyToRLSOverUnixSocket: envoy-rls serves gRPC on a Unix socket
// (--grpc-addr unix:///...), as in the sidecar-uds component, and Envoy
// reaches it through the envoy_rls_uds cluster: envoy.yaml's, with the
// filter's cluster_name changed as its comment says, and the cluster and
// filter change of components/sidecar-uds's EnvoyFilter patch. Only the
// socket's path is moved (from /var/run/envoy-rls).
func TestEnvoyToRLSOverUnixSocket(t *testing.T) {
	cases := []udsCase{
		{"envoy.yaml", func(t *testing.T, doc map[string]any) {
			bootstrapPath(t, rateLimitFilter(t, doc), "rate_limit_service", "grpc_service", "envoy_grpc")["cluster_name"] = "envoy_rls_uds"
		}},
		{"sidecar-uds EnvoyFilter", func(t *testing.T, doc map[string]any) {
			envoyGRPC, clusterValue := sidecarUDSPatch(t)
			rateLimitFilter(t, doc)["rate_limit_service"].(map[string]any)["grpc_service"].(map[string]any)["envoy_grpc"] = envoyGRPC
			uds := cluster(t, doc, "envoy_rls_uds")
			clear(uds)
			for k, v := range clusterValue {
				uds[k] = v
			}
		}},
	}
	for _, st := range stores {
		for _, tc := range cases {
			t.Run(string(st)+"/"+tc.name, func(t *testing.T) {
				// A short directory: a socket path has at most 107 bytes.
				dir, err := os.MkdirTemp("", "rls-uds-")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.RemoveAll(dir) })
				sock := "unix://" + filepath.Join(dir, "rls.sock")
				doc := shippedBootstrap(t)
				patient(rateLimitFilter(t, doc))
				tc.edit(t, doc)
				s := startStack(t, stackOpts{Store: st, Bootstrap: encodeBootstrap(t, doc),
					ServeArgs: []string{"--grpc-addr", sock},
					Addresses: envoytest.Addresses{Clusters: map[string]string{"envoy_rls_uds": sock}}})
				before := s.envoyCounters(t, rlOK, rlError)
				got := s.loginSequence(t, "127.0.0.34")
				d := since(before, s.envoyCounters(t, rlOK, rlError))
				if got != loginsLimited || d[rlError] != 0 || d[rlOK] != 5 {
					t.Errorf("logins %s, ratelimit.ok +%d, ratelimit.error +%d; want %s, 5 and 0", got, d[rlOK], d[rlError], loginsLimited)
				}
				if n := s.envoyStat(t, "cluster.envoy_rls_uds.upstream_rq_200"); n != 6 {
					t.Errorf("Envoy's envoy_rls_uds cluster answered %d calls, want all 6", n)
				}
			})
		}
	}
}

// sidecarUDSPatch reads components/sidecar-uds's JSON patch of the sidecar
// EnvoyFilter: the envoy_grpc it puts into the rate-limit filter and the
// cluster it adds.
func sidecarUDSPatch(t testing.TB) (envoyGRPC, clusterValue map[string]any) {
	t.Helper()
	var ops []map[string]any
	if err := yaml.Unmarshal(childproc.ReadRepoFile(t, "manifests/istio/components/sidecar-uds/envoyfilter-uds.yaml"), &ops); err != nil {
		t.Fatalf("parse the sidecar-uds patch: %v", err)
	}
	for _, op := range ops {
		switch {
		case op["op"] == "replace" && op["path"] == "/spec/configPatches/0/patch/value/typed_config/rate_limit_service/grpc_service/envoy_grpc":
			envoyGRPC, _ = op["value"].(map[string]any)
		case op["op"] == "add" && op["path"] == "/spec/configPatches/0":
			clusterValue = bootstrapPath(t, op["value"].(map[string]any), "patch", "value")
		}
	}
	if envoyGRPC == nil || clusterValue == nil {
		t.Fatalf("the sidecar-uds patch no longer replaces the filter's envoy_grpc and adds a cluster: %v", ops)
	}
	return envoyGRPC, clusterValue
}

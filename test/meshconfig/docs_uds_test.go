package meshconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"testing"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	networking "istio.io/api/networking/v1alpha3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/envoy-rls/envoy-rls/internal/testkit/kubelint"
	"github.com/envoy-rls/envoy-rls/internal/testkit/shipped"
)

// udsDocRel is the guide whose Unix-socket sidecar example is checked here,
// and udsDocHeading the section that holds it.
const (
	udsDocRel     = "docs/deploying.md"
	udsDocHeading = "### envoy-rls in the workload's pod, on a Unix socket"
)

// yamlBlocks returns the ```yaml blocks of the markdown section that starts
// at heading and ends at the next heading of its level, without their
// list indentation.
func yamlBlocks(md, heading string) ([]string, error) {
	start := strings.Index(md, "\n"+heading+"\n")
	if start < 0 {
		return nil, fmt.Errorf("no section %q", heading)
	}
	section := md[start+len(heading)+2:]
	level := heading[:strings.Index(heading, " ")+1]
	if end := strings.Index(section, "\n"+level); end >= 0 {
		section = section[:end]
	}
	return shipped.YAMLBlocks(section), nil
}

// checkUDSExample decodes the guide's Deployment and EnvoyFilter and checks
// that they fit together: the envoy-rls container listens on the socket
// the cluster dials, in a volume it shares with istio-proxy, and the
// rate-limit filter uses that cluster over HTTP/2.
func checkUDSExample(md string) error {
	blocks, err := yamlBlocks(md, udsDocHeading)
	if err != nil {
		return fmt.Errorf("%s: %w", udsDocRel, err)
	}
	if len(blocks) != 2 {
		return fmt.Errorf("%s: %d yaml blocks under %q, want the Deployment and the EnvoyFilter", udsDocRel, len(blocks), udsDocHeading)
	}
	dec, err := newKubeDecoder()
	if err != nil {
		return err
	}
	objs := &kubelint.Objects{}
	for i, b := range blocks {
		if err := dec.DecodeStream(fmt.Sprintf("%s block %d", udsDocRel, i+1), []byte(b), objs); err != nil {
			return err
		}
	}
	filters := envoyFilters(objs)
	if len(objs.Deployments) != 1 || len(filters) != 1 {
		return fmt.Errorf("%s: %d Deployments and %d EnvoyFilters, want one of each", udsDocRel, len(objs.Deployments), len(filters))
	}
	pipe, err := udsCluster(filters[0])
	if err != nil {
		return err
	}
	d := objs.Deployments[0]
	return checkUDSPod(fmt.Sprintf("%s Deployment %s/%s", udsDocRel, d.Namespace, d.Name), d, pipe)
}

// udsCluster checks the EnvoyFilter's patches and returns the socket path
// its rate-limit cluster dials.
func udsCluster(ef *envoyFilterDoc) (string, error) {
	patches, err := decodePatches(ef)
	if err != nil {
		return "", err
	}
	clusters := map[string]*clusterv3.Cluster{}
	var rlsCluster string
	var errs []error
	for _, dp := range patches {
		switch v := dp.value.(type) {
		case *clusterv3.Cluster:
			if dp.cp.GetPatch().GetOperation() != networking.EnvoyFilter_Patch_ADD {
				errs = append(errs, fmt.Errorf("%s: want operation ADD for the socket's cluster", dp.where))
			}
			clusters[v.GetName()] = v
		case *hcmv3.HttpFilter:
			cfg, ferrs := checkRateLimitFilter(dp.where, v)
			errs = append(errs, ferrs...)
			rlsCluster = cfg.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
		}
	}
	c, ok := clusters[rlsCluster]
	if !ok {
		return "", errors.Join(append(errs, fmt.Errorf("%s: the rate-limit filter uses cluster %q, which no CLUSTER patch adds", ef.where, rlsCluster))...)
	}
	if err := checkHTTP2(c); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", ef.where, err))
	}
	var pipe string
	for _, ep := range c.GetLoadAssignment().GetEndpoints() {
		for _, lb := range ep.GetLbEndpoints() {
			pipe = lb.GetEndpoint().GetAddress().GetPipe().GetPath()
		}
	}
	if pipe == "" {
		errs = append(errs, fmt.Errorf("%s: cluster %q has no pipe (Unix socket) endpoint", ef.where, rlsCluster))
	}
	return pipe, errors.Join(errs...)
}

// checkUDSPod checks that Deployment d's envoy-rls container serves on pipe
// from a volume that istio-proxy mounts at the same directory. where names
// d in messages.
func checkUDSPod(where string, d *appsv1.Deployment, pipe string) error {
	var errs []error
	var grpcAddr *corev1.EnvVar
	found := false
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name != "envoy-rls" {
			continue
		}
		found = true
		for i := range c.Env {
			if c.Env[i].Name == "ENVOY_RLS_GRPC_ADDR" {
				grpcAddr = &c.Env[i]
			}
		}
	}
	if !found {
		return fmt.Errorf("%s: no container named envoy-rls: nothing serves the socket %s", where, pipe)
	}
	if e := grpcAddr; e == nil || e.Value != "unix://"+pipe {
		errs = append(errs, fmt.Errorf("%s: ENVOY_RLS_GRPC_ADDR = %v, want unix://%s, the socket the EnvoyFilter's cluster dials", where, e, pipe))
	}
	dir := path.Dir(pipe)
	var volume string
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, m := range c.VolumeMounts {
			if c.Name == "envoy-rls" && m.MountPath == dir {
				volume = m.Name
			}
		}
	}
	if volume == "" {
		return errors.Join(append(errs, fmt.Errorf("%s: the envoy-rls container mounts no volume at %s", where, dir))...)
	}
	var proxyMounts map[string]struct {
		MountPath string `json:"mountPath"`
	}
	ann := d.Spec.Template.Annotations["sidecar.istio.io/userVolumeMount"]
	if err := json.Unmarshal([]byte(ann), &proxyMounts); err != nil {
		errs = append(errs, fmt.Errorf("%s: annotation sidecar.istio.io/userVolumeMount %q: %w", where, ann, err))
	} else if proxyMounts[volume].MountPath != dir {
		errs = append(errs, fmt.Errorf("%s: istio-proxy mounts volume %q at %q, want %s (where envoy-rls creates the socket)", where, volume, proxyMounts[volume].MountPath, dir))
	}
	if d.Spec.Template.Spec.SecurityContext == nil || d.Spec.Template.Spec.SecurityContext.FSGroup == nil {
		errs = append(errs, fmt.Errorf("%s: no pod fsGroup: istio-proxy could not open the 0660 socket", where))
	}
	return errors.Join(errs...)
}

func TestDocsUnixSocketSidecar(t *testing.T) {
	if err := checkUDSExample(string(childproc.ReadRepoFile(t, udsDocRel))); err != nil {
		t.Fatal(err)
	}
}

// TestDocsUnixSocketSidecarMismatches breaks the example in ways that
// would leave Envoy without its rate-limit service; each must be caught.
func TestDocsUnixSocketSidecarMismatches(t *testing.T) {
	md := string(childproc.ReadRepoFile(t, udsDocRel))
	tests := []struct {
		name, old, new, want string
	}{
		{"socket path", "value: unix:///var/run/envoy-rls/rls.sock", "value: unix:///tmp/rls.sock", "ENVOY_RLS_GRPC_ADDR"},
		{"proxy mount", `{"mountPath":"/var/run/envoy-rls"}`, `{"mountPath":"/var/run/rls"}`, "istio-proxy mounts"},
		{"no fsGroup", "fsGroup: 65532", "runAsNonRoot: true", "fsGroup"},
		{"cluster name", "cluster_name: envoy_rls_uds\n   ```", "cluster_name: envoy_rls\n   ```", "no CLUSTER patch adds"},
		{"unknown field", "connect_timeout: 1s\n", "connect_timeout: 1s\n           conect_timeout: 1s\n", "conect_timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if strings.Count(md, tt.old) != 1 {
				t.Fatalf("mutation target %q found %d times in %s; update the test", tt.old, strings.Count(md, tt.old), udsDocRel)
			}
			err := checkUDSExample(strings.Replace(md, tt.old, tt.new, 1))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one naming %q", err, tt.want)
			}
		})
	}
}

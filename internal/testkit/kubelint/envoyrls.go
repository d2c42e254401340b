package kubelint

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// What envoy-rls's own wiring must match: the name of its Deployment and
// container, and the defaults of `envoy-rls serve` (--config-dir,
// --grpc-addr, --http-addr) that manifests rely on unless they set the
// flags' environment twins.
const (
	envoyRLSName     = "envoy-rls"
	defaultConfigDir = "/etc/envoy-rls/config"
	grpcPort         = 8081
	httpPort         = 8080
)

// checkEnvoyRLSContainer checks the wiring specific to envoy-rls: its
// probes, ports and rules mount.
func checkEnvoyRLSContainer(p *problems, cw string, c corev1.Container, volumes map[string]corev1.Volume) {
	if pr := c.ReadinessProbe; pr == nil || pr.HTTPGet == nil || pr.HTTPGet.Path != "/readyz" {
		p.add("%s: readinessProbe must GET /readyz", cw)
	}
	if pr := c.LivenessProbe; pr == nil || pr.HTTPGet == nil || pr.HTTPGet.Path != "/healthz" {
		p.add("%s: livenessProbe must GET /healthz", cw)
	}
	grpc, socket := listenerPort(p, cw, c, "ENVOY_RLS_GRPC_ADDR", grpcPort)
	if socket != "" {
		checkSocketDir(p, cw, c, volumes, socket)
	}
	http, _ := listenerPort(p, cw, c, "ENVOY_RLS_HTTP_ADDR", httpPort)
	for _, want := range []int32{grpc, http} {
		if want != 0 && !hasContainerPort(c, want) {
			p.add("%s: containerPort %d is missing", cw, want)
		}
	}
	if xdsRules(c) {
		// The rules come from the management server: no directory.
		return
	}
	dir := envValue(c, "ENVOY_RLS_CONFIG_DIR", defaultConfigDir)
	mounted := false
	for _, m := range c.VolumeMounts {
		if path.Clean(m.MountPath) != path.Clean(dir) {
			continue
		}
		mounted = true
		if m.SubPath != "" {
			p.add("%s: the rules mount uses subPath, which never sees ConfigMap updates", cw)
		}
		if v, ok := volumes[m.Name]; ok && v.ConfigMap == nil {
			p.add("%s: the rules directory %s is not a ConfigMap volume", cw, dir)
		}
	}
	if !mounted {
		p.add("%s: nothing is mounted at the config directory %s", cw, dir)
	}
}

// xdsRules reports whether the container takes its rules from xDS.
func xdsRules(c corev1.Container) bool {
	return envValue(c, "ENVOY_RLS_CONFIG_SOURCE", "file") == "xds"
}

// envoyRLSOnXDS reports whether the envoy-rls Deployment's container takes
// its rules from xDS, and so mounts no rules ConfigMap.
func envoyRLSOnXDS(objs *Objects) bool {
	for _, d := range objs.Deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			if d.Name == envoyRLSName && c.Name == envoyRLSName && xdsRules(c) {
				return true
			}
		}
	}
	return false
}

// envValue returns the literal value of the container's env variable name,
// or def when the container does not set it.
func envValue(c corev1.Container, name, def string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return def
}

// listenerPort returns the TCP port of the listener whose address the env
// variable sets (def when unset), or, for a unix:// address, 0 and the
// socket's path: such a listener needs no containerPort.
func listenerPort(p *problems, cw string, c corev1.Container, env string, def int32) (port int32, socket string) {
	addr := envValue(c, env, "")
	if addr == "" {
		return def, ""
	}
	if rest, ok := strings.CutPrefix(addr, "unix://"); ok {
		if !path.IsAbs(rest) {
			p.add("%s: %s %q: want unix:///absolute/path", cw, env, addr)
			return 0, ""
		}
		return 0, rest
	}
	_, portStr, err := net.SplitHostPort(addr)
	n, perr := strconv.ParseUint(portStr, 10, 16)
	if err != nil || perr != nil || n == 0 {
		p.add("%s: %s %q: want host:port with a fixed port, or unix:///path", cw, env, addr)
		return 0, ""
	}
	return int32(n), ""
}

// checkSocketDir requires the directory of envoy-rls's Unix socket to be an
// emptyDir mounted into the container: the root filesystem is read-only,
// and an emptyDir is what another container of the pod (istio-proxy) can
// mount too.
func checkSocketDir(p *problems, cw string, c corev1.Container, volumes map[string]corev1.Volume, socket string) {
	dir := path.Dir(socket)
	for _, m := range c.VolumeMounts {
		if path.Clean(m.MountPath) != dir {
			continue
		}
		if v, ok := volumes[m.Name]; ok && v.EmptyDir == nil {
			p.add("%s: the socket directory %s is volume %q, not an emptyDir (want a writable volume the pod's proxy can mount)", cw, dir, m.Name)
		}
		if m.ReadOnly {
			p.add("%s: the socket directory %s is mounted read-only (envoy-rls creates the socket there)", cw, dir)
		}
		return
	}
	p.add("%s: nothing is mounted at the socket directory %s (want an emptyDir the pod's proxy mounts too)", cw, dir)
}

func hasContainerPort(c corev1.Container, port int32) bool {
	for _, cp := range c.Ports {
		if cp.ContainerPort == port {
			return true
		}
	}
	return false
}

// checkRedisURLs checks that each host of a literal ENVOY_RLS_REDIS_URL
// (several, comma-separated, for Sentinel and Cluster) is a Service port
// of the manifests or one of external.
func checkRedisURLs(p *problems, objs *Objects, external []string) {
	for _, d := range objs.Deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				if e.Name != "ENVOY_RLS_REDIS_URL" || e.Value == "" {
					continue
				}
				where := fmt.Sprintf("Deployment %s/%s: ENVOY_RLS_REDIS_URL", d.Namespace, d.Name)
				u, err := url.Parse(e.Value)
				if err != nil {
					p.add("%s: %w", where, err)
					continue
				}
				for _, host := range strings.Split(u.Host, ",") {
					if !svcHostExists(host, objs.Services) && !slices.Contains(external, host) {
						p.add("%s: %s is not a Service and port of these manifests", where, host)
					}
				}
			}
		}
	}
}

// svcHostExists reports whether hostport ("name.ns.svc.cluster.local:port")
// names a Service port of the manifests.
func svcHostExists(hostport string, services []*corev1.Service) bool {
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return false
	}
	for _, s := range services {
		if host != s.Name+"."+s.Namespace+".svc.cluster.local" && host != s.Name+"."+s.Namespace+".svc" {
			continue
		}
		for _, sp := range s.Spec.Ports {
			if int(sp.Port) == port {
				return true
			}
		}
	}
	return false
}

// checkRulesConfigMap finds the ConfigMap the envoy-rls Deployment mounts
// as its rules, validates its rules with want.Validate, and checks that it
// holds exactly want.Files. The rules of envoy-rls containers in other
// Deployments are checked too, but may be a subset.
func checkRulesConfigMap(p *problems, objs *Objects, want Rules) {
	cm := rulesConfigMap(objs)
	switch {
	case cm == nil && envoyRLSOnXDS(objs):
		return
	case cm == nil:
		p.add("no ConfigMap is mounted as the envoy-rls rules directory")
		return
	}
	byKey := checkRuleCopies(p, cm, want, want.CopyDir+"/")
	where := fmt.Sprintf("ConfigMap %s/%s", cm.Namespace, cm.Name)
	for _, k := range sortedKeys(byKey) {
		if _, ok := cm.Data[k]; !ok {
			p.add("%s: %s/%s is missing (copy it to %s/ and list it in the configMapGenerator)", where, want.Source, k, want.CopyDir)
		}
	}
	// envoy-rls running inside another workload's pod (on a Unix socket
	// beside its proxy) serves only that workload's domains: its ConfigMap
	// may hold fewer files, but each must be a faithful copy.
	for _, other := range podRulesConfigMaps(objs) {
		checkRuleCopies(p, other, want, "the directory its configMapGenerator reads")
	}
}

// checkRuleCopies validates cm's rules with want.Validate and checks that
// each of its keys is an identical copy of a file of want.Source. It
// returns want.Files by base name. copyTo tells the reader where the copy
// lives.
func checkRuleCopies(p *problems, cm *corev1.ConfigMap, want Rules, copyTo string) map[string][]byte {
	where := fmt.Sprintf("ConfigMap %s/%s", cm.Namespace, cm.Name)
	if want.Validate != nil {
		files := map[string][]byte{}
		for k, v := range cm.Data {
			files[where+" "+k] = []byte(v)
		}
		if err := want.Validate(files); err != nil {
			p.add("%s: rules do not validate:\n%w", where, err)
		}
	}
	byKey := map[string][]byte{}
	for name, data := range want.Files {
		byKey[path.Base(name)] = data
	}
	for _, k := range sortedKeys(cm.Data) {
		if w, ok := byKey[k]; !ok {
			p.add("%s: key %q is not a file of %s", where, k, want.Source)
		} else if !bytes.Equal(w, []byte(cm.Data[k])) {
			p.add("%s: key %q differs from %s/%s (copy it to %s)", where, k, want.Source, k, copyTo)
		}
	}
	return byKey
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// rulesConfigMap returns the ConfigMap that the envoy-rls Deployment
// mounts, or nil.
func rulesConfigMap(objs *Objects) *corev1.ConfigMap {
	for _, d := range objs.Deployments {
		if d.Name != envoyRLSName {
			continue
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.ConfigMap == nil {
				continue
			}
			for _, cm := range objs.ConfigMaps {
				if cm.Namespace == d.Namespace && cm.Name == v.ConfigMap.Name {
					return cm
				}
			}
		}
	}
	return nil
}

// podRulesConfigMaps returns the ConfigMaps mounted at the config directory
// of an envoy-rls container in a Deployment other than envoy-rls's own.
func podRulesConfigMaps(objs *Objects) []*corev1.ConfigMap {
	var out []*corev1.ConfigMap
	for _, d := range objs.Deployments {
		if d.Name == envoyRLSName {
			continue
		}
		pod := d.Spec.Template.Spec
		for _, c := range pod.Containers {
			if c.Name != envoyRLSName {
				continue
			}
			dir := path.Clean(envValue(c, "ENVOY_RLS_CONFIG_DIR", defaultConfigDir))
			for _, m := range c.VolumeMounts {
				if path.Clean(m.MountPath) != dir {
					continue
				}
				for _, v := range pod.Volumes {
					if v.Name != m.Name || v.ConfigMap == nil {
						continue
					}
					for _, cm := range objs.ConfigMaps {
						if cm.Namespace == d.Namespace && cm.Name == v.ConfigMap.Name {
							out = append(out, cm)
						}
					}
				}
			}
		}
	}
	return out
}

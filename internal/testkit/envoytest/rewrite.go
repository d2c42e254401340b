package envoytest

import (
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"
)

// Addresses moves a bootstrap's endpoints, so a config written for another
// network (docker-compose host names, a pod's ports) runs on loopback. It is
// the one place where a shipped bootstrap's addresses are rewritten.
type Addresses struct {
	// Clusters maps a static cluster's name to the endpoint it gets:
	// "host:port", or "unix:///path" for a pipe. Every endpoint of the
	// cluster is replaced by that one; a STRICT_DNS cluster with a literal
	// IP works as it is.
	Clusters map[string]string
	// Listeners maps a static listener's name to "host:port" (port 0 for a
	// free one; read it back with ListenerAddr). Unnamed listeners keep
	// their address.
	Listeners map[string]string
	// Admin is the admin interface's "host:port"; "" keeps it. Start reads
	// the real admin address, so 127.0.0.1:0 is the usual choice.
	Admin string
}

// Rewrite returns the bootstrap YAML with the addresses moved, as JSON
// (which Envoy reads as YAML). A cluster or listener named in a that the
// bootstrap lacks is an error, so a renamed cluster cannot go unnoticed.
func Rewrite(bootstrap []byte, a Addresses) ([]byte, error) {
	var doc map[string]any
	if err := yaml.Unmarshal(bootstrap, &doc); err != nil {
		return nil, fmt.Errorf("envoytest: parse bootstrap: %w", err)
	}
	if a.Admin != "" {
		admin, _ := doc["admin"].(map[string]any)
		if admin == nil {
			admin = map[string]any{}
			doc["admin"] = admin
		}
		sa, err := socketAddress(a.Admin)
		if err != nil {
			return nil, fmt.Errorf("envoytest: admin: %w", err)
		}
		admin["address"] = sa
	}
	static, _ := doc["static_resources"].(map[string]any)
	seen := map[string]bool{}
	for _, c := range list(static, "clusters") {
		name, _ := c["name"].(string)
		addr, ok := a.Clusters[name]
		if !ok {
			continue
		}
		seen["cluster "+name] = true
		ep, err := endpointAddress(addr)
		if err != nil {
			return nil, fmt.Errorf("envoytest: cluster %s: %w", name, err)
		}
		c["load_assignment"] = map[string]any{
			"cluster_name": name,
			"endpoints": []any{map[string]any{
				"lb_endpoints": []any{map[string]any{"endpoint": map[string]any{"address": ep}}},
			}},
		}
		if strings.HasPrefix(addr, "unix://") && c["type"] != nil && c["type"] != "STATIC" {
			// DNS cluster types take no pipe.
			c["type"] = "STATIC"
			delete(c, "dns_lookup_family")
		}
	}
	for _, l := range list(static, "listeners") {
		name, _ := l["name"].(string)
		addr, ok := a.Listeners[name]
		if !ok {
			continue
		}
		seen["listener "+name] = true
		sa, err := socketAddress(addr)
		if err != nil {
			return nil, fmt.Errorf("envoytest: listener %s: %w", name, err)
		}
		l["address"] = sa
	}
	for name := range a.Clusters {
		if !seen["cluster "+name] {
			return nil, fmt.Errorf("envoytest: the bootstrap has no static cluster %q", name)
		}
	}
	for name := range a.Listeners {
		if !seen["listener "+name] {
			return nil, fmt.Errorf("envoytest: the bootstrap has no static listener %q", name)
		}
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("envoytest: encode bootstrap: %w", err)
	}
	return out, nil
}

func list(m map[string]any, key string) []map[string]any {
	raw, _ := m[key].([]any)
	var out []map[string]any
	for _, v := range raw {
		if mv, ok := v.(map[string]any); ok {
			out = append(out, mv)
		}
	}
	return out
}

func endpointAddress(addr string) (map[string]any, error) {
	if path, ok := strings.CutPrefix(addr, "unix://"); ok {
		if path == "" {
			return nil, fmt.Errorf("empty unix socket path in %q", addr)
		}
		return map[string]any{"pipe": map[string]any{"path": path}}, nil
	}
	return socketAddress(addr)
}

func socketAddress(addr string) (map[string]any, error) {
	i := strings.LastIndex(addr, ":")
	if i <= 0 {
		return nil, fmt.Errorf("address %q is not host:port", addr)
	}
	var port int
	if _, err := fmt.Sscanf(addr[i+1:], "%d", &port); err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("address %q has no valid port", addr)
	}
	host := strings.Trim(addr[:i], "[]")
	return map[string]any{"socket_address": map[string]any{"address": host, "port_value": port}}, nil
}

// Package xdsrules is the xDS config source: it subscribes to
// RateLimitConfig resources (type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig)
// on a management server over ADS, state of the world, as
// envoyproxy/ratelimit does with CONFIG_TYPE=GRPC_XDS_SOTW.
//
// Every push goes through the same grammar as a rule file: each resource
// is rendered as the YAML document a file would hold and given to
// rules.Parse, so a push and a file obey one set of rules and one set of
// error messages. A push whose every resource validates becomes one new
// rules.Snapshot, swapped in atomically and ACKed with its version; any
// error NACKs the whole push with every problem in error_detail, and the
// last good snapshot stays in force. A lost stream keeps the current rules
// and reconnects with exponential backoff.
//
// The RateLimitConfig proto has no field for envoy-rls's extensions
// (algorithm, burst, unit_multiplier, lease, hash_tag, rate_limits); a
// local extensions file (see Extensions) supplies them per domain and per
// limit name.
//
// This package reads configuration only. It must not talk to Redis, import
// the backends, or serve anything: the composition root wires its Current,
// Ready and metrics into the service.
package xdsrules

import (
	"errors"
	"fmt"
	"strings"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"

	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// TypeURL is the xDS type of the resources the client subscribes to.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// sourceName is the file name Parse reports for a resource, so that an
// error reads "xds:<resource>:<line>: descriptors[0].rate_limit.unit: ...".
func sourceName(resource string) string { return "xds:" + resource }

// BuildSnapshot validates the resources of one push and builds the
// snapshot they define; version is recorded as each domain's source. On
// failure it returns every problem of every resource. A push must define at
// least one rule, for the reason rules.LoadDir gives: an empty push is far
// more often a broken control plane than an intent to lift every limit.
func BuildSnapshot(confs []*rlsconf.RateLimitConfig, version string, ext *Extensions, opts rules.Options) (*rules.Snapshot, error) {
	var errs []error
	domains := make([]*rules.Domain, 0, len(confs))
	for _, c := range confs {
		d, err := Convert(c, ext, opts)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		d.Source = rules.Source{Type: rules.SourceXDS, Name: c.GetName(), Version: version}
		domains = append(domains, d)
	}
	// The resources that parsed are combined even when others did not, so
	// that a duplicate domain is reported along with the parse errors.
	snap, err := rules.NewSnapshot(domains...)
	if err := errors.Join(append(errs, err)...); err != nil {
		return nil, err
	}
	if snap.NumRules() == 0 {
		return nil, fmt.Errorf("xdsrules: push %q defines no rule (%d resources; want at least one, and to lift every limit keep a rule with unlimited: true)", version, len(confs))
	}
	return snap, nil
}

// Convert parses one RateLimitConfig, with the extensions of its domain,
// through rules.Parse.
func Convert(c *rlsconf.RateLimitConfig, ext *Extensions, opts rules.Options) (*rules.Domain, error) {
	if c.GetName() == "" {
		return nil, errors.New("xdsrules: a RateLimitConfig has no name (want a unique resource name)")
	}
	doc, err := render(c, ext)
	if err != nil {
		return nil, fmt.Errorf("xdsrules: %s: %w", sourceName(c.GetName()), err)
	}
	return rules.Parse(sourceName(c.GetName()), doc, opts)
}

// render returns the rule file that c, with the extensions of its domain,
// stands for: what the grammar parses, so that its errors' paths
// (descriptors[0].rate_limit.unit) name the resource's own fields.
func render(c *rlsconf.RateLimitConfig, ext *Extensions) ([]byte, error) {
	root := yamlMap{{"domain", c.GetDomain()}}
	root = append(root, kv{"descriptors", descriptors(c.GetDescriptors(), ext.domain(c.GetDomain()))})
	return yaml.Marshal(root.node())
}

func descriptors(ds []*rlsconf.RateLimitDescriptor, ext *domainExt) []yamlMap {
	out := make([]yamlMap, 0, len(ds))
	for _, d := range ds {
		m := yamlMap{{"key", d.GetKey()}}
		if d.GetValue() != "" {
			m = append(m, kv{"value", d.GetValue()})
		}
		if d.GetShadowMode() {
			m = append(m, kv{"shadow_mode", true})
		}
		if d.GetDetailedMetric() {
			m = append(m, kv{"detailed_metric", true})
		}
		if rl := d.GetRateLimit(); rl != nil {
			m = append(m, ext.limit(rateLimit(rl), rl.GetName(), rl.GetUnlimited())...)
		}
		if len(d.GetDescriptors()) > 0 {
			m = append(m, kv{"descriptors", descriptors(d.GetDescriptors(), ext)})
		}
		out = append(out, m)
	}
	return out
}

// rateLimit renders a policy as the file's rate_limit mapping. An
// unlimited policy without unit or requests_per_unit gets neither, as the
// reference's files write it.
func rateLimit(rl *rlsconf.RateLimitPolicy) yamlMap {
	m := yamlMap{}
	if !rl.GetUnlimited() || rl.GetUnit() != rlsconf.RateLimitUnit_UNKNOWN || rl.GetRequestsPerUnit() != 0 {
		m = append(m, kv{"unit", strings.ToLower(rl.GetUnit().String())}, kv{"requests_per_unit", rl.GetRequestsPerUnit()})
	}
	if rl.GetUnlimited() {
		m = append(m, kv{"unlimited", true})
	}
	if rl.GetName() != "" {
		m = append(m, kv{"name", rl.GetName()})
	}
	if len(rl.GetReplaces()) > 0 {
		rs := make([]yamlMap, 0, len(rl.GetReplaces()))
		for _, r := range rl.GetReplaces() {
			rs = append(rs, yamlMap{{"name", r.GetName()}})
		}
		m = append(m, kv{"replaces", rs})
	}
	return m
}

// kv and yamlMap keep a mapping's fields in the order a person would
// write them, so a rendered resource reads like a rule file.
type kv struct {
	k string
	v any
}

type yamlMap []kv

func (m yamlMap) node() *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode}
	for _, f := range m {
		n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: f.k}, toNode(f.v))
	}
	return n
}

func toNode(v any) *yaml.Node {
	switch v := v.(type) {
	case yamlMap:
		return v.node()
	case []yamlMap:
		n := &yaml.Node{Kind: yaml.SequenceNode}
		for _, e := range v {
			n.Content = append(n.Content, e.node())
		}
		return n
	case []any:
		n := &yaml.Node{Kind: yaml.SequenceNode}
		for _, e := range v {
			n.Content = append(n.Content, toNode(e))
		}
		return n
	}
	var n yaml.Node
	// Encoding a scalar, list or mapping of plain values cannot fail.
	_ = n.Encode(v)
	return &n
}

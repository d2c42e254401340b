package xdsrules

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// Extensions carries, for an xDS-configured service, what the
// RateLimitConfig proto cannot: envoy-rls's extensions to the rule file
// (docs/architecture.md#config-sources). It is a small local YAML file
// (--xds-extensions-file):
//
//	domains:
//	  api:
//	    defaults:            # every rate_limit of the domain but unlimited ones
//	      algorithm: token_bucket
//	    limits:              # the rate_limit with this name; wins over defaults
//	      per_user:
//	        algorithm: gcra
//	        burst: 150
//	        warmup: {period: 10m, from: 0.25}  # a push that changes the limit restarts it
//	        hash_tag: user_id          # set on the limit's descriptor
//	        rate_limits:               # more limits on that descriptor, all must pass
//	          - {unit: day, requests_per_unit: 10000, name: daily}
//
// defaults and limits take the rate_limit extension fields (algorithm,
// unit_multiplier, burst, sub_windows, lease, warmup, on_limit, max_delay); limits also take hash_tag and
// rate_limits. Each value is checked as the rule grammar checks it when
// the file is loaded, and again in every push it applies to. The limits
// themselves, their names and the tree stay the control plane's: the file
// refines what the management server sends, it never adds a rule.
//
// A nil *Extensions adds nothing. It is immutable once loaded.
type Extensions struct {
	domains map[string]*domainExt
}

type domainExt struct {
	defaults yamlMap
	limits   map[string]*limitExt
}

type limitExt struct {
	fields     yamlMap // rate_limit fields
	hashTag    any     // nil: none
	rateLimits []any   // extra limits on the descriptor
}

var (
	limitExtFields = []string{"algorithm", "unit_multiplier", "burst", "sub_windows", "lease", "warmup", "on_limit", "max_delay"}
	namedExtFields = append(slices.Clone(limitExtFields), "hash_tag", "rate_limits")
)

// extFile is the file's shape; unknown fields are refused by the decoder.
type extFile struct {
	Domains map[string]struct {
		Defaults map[string]any            `yaml:"defaults"`
		Limits   map[string]map[string]any `yaml:"limits"`
	} `yaml:"domains"`
}

// LoadExtensions reads and validates an extensions file.
func LoadExtensions(path string, opts rules.Options) (*Extensions, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("xdsrules: extensions: %w", err)
	}
	return ParseExtensions(path, data, opts)
}

// ParseExtensions validates an extensions file's content; name is used in
// errors. Every problem is reported, each naming the file and the path
// within it.
func ParseExtensions(name string, data []byte, opts rules.Options) (*Extensions, error) {
	var f extFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("xdsrules: %s: %w (want domains: {<domain>: {defaults: {...}, limits: {<name>: {...}}}})", name, err)
	}
	ext := &Extensions{domains: map[string]*domainExt{}}
	var errs []error
	for _, domain := range slices.Sorted(maps.Keys(f.Domains)) {
		in := f.Domains[domain]
		d := &domainExt{limits: map[string]*limitExt{}}
		path := "domains." + domain
		var err error
		if d.defaults, err = fieldsOf(in.Defaults, limitExtFields); err != nil {
			errs = append(errs, fmt.Errorf("xdsrules: %s: %s.defaults: %w", name, path, err))
		}
		for _, lname := range slices.Sorted(maps.Keys(in.Limits)) {
			l, err := limitOf(in.Limits[lname])
			if err != nil {
				errs = append(errs, fmt.Errorf("xdsrules: %s: %s.limits.%s: %w", name, path, lname, err))
				continue
			}
			d.limits[lname] = l
		}
		ext.domains[domain] = d
		for _, err := range d.check(domain, path, opts) {
			errs = append(errs, fmt.Errorf("xdsrules: %s: %w", name, err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return ext, nil
}

func limitOf(in map[string]any) (*limitExt, error) {
	all, err := fieldsOf(in, namedExtFields)
	if err != nil {
		return nil, err
	}
	l := &limitExt{}
	for _, f := range all {
		switch f.k {
		case "hash_tag":
			l.hashTag = f.v
		case "rate_limits":
			list, ok := f.v.([]any)
			if !ok || len(list) == 0 {
				return nil, errors.New("rate_limits: want a non-empty list of rate limits")
			}
			l.rateLimits = list
		default:
			l.fields = append(l.fields, f)
		}
	}
	return l, nil
}

// fieldsOf returns m's fields in name order, refusing any not in allowed.
func fieldsOf(m map[string]any, allowed []string) (yamlMap, error) {
	var out yamlMap
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !slices.Contains(allowed, k) {
			return nil, fmt.Errorf("unknown field %q (want one of %v; limits, units and the tree come from the management server)", k, allowed)
		}
		out = append(out, kv{k, m[k]})
	}
	return out, nil
}

// check runs every extension of the domain through the rule grammar, on a
// stand-in limit, so that a bad value is refused when the file loads
// rather than in every push. path names the domain in errors.
func (d *domainExt) check(domain, path string, opts rules.Options) []error {
	var errs []error
	probe := func(name, where string) {
		key := "probe"
		if l := d.limits[name]; l != nil {
			if tag, ok := l.hashTag.(string); ok && tag != "" {
				key = tag
			}
		}
		rl := yamlMap{{"unit", "second"}, {"requests_per_unit", 1}}
		if name != "" {
			rl = append(rl, kv{"name", name})
		}
		desc := append(yamlMap{{"key", key}}, d.limit(rl, name, false)...)
		doc, err := yaml.Marshal(yamlMap{{"domain", domain}, {"descriptors", []yamlMap{desc}}}.node())
		if err == nil {
			_, err = rules.Parse(where, doc, opts)
		}
		errs = append(errs, probeErrors(where, err)...)
	}
	probe("", path+".defaults")
	for _, name := range slices.Sorted(maps.Keys(d.limits)) {
		probe(name, path+".limits."+name)
	}
	return errs
}

// probeErrors rewrites the grammar's errors about a stand-in limit to
// name the extensions file's own path: the stand-in's lines and
// descriptor path mean nothing to the file's author.
func probeErrors(where string, err error) []error {
	if err == nil {
		return nil
	}
	var list []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	} else {
		list = []error{err}
	}
	out := make([]error, 0, len(list))
	for _, e := range list {
		var re *rules.Error
		if !errors.As(e, &re) {
			out = append(out, fmt.Errorf("%s: %w", where, e))
			continue
		}
		path := re.Path
		if i := strings.Index(path, ".rate_limit"); i >= 0 {
			path = strings.TrimPrefix(path[i+1:], "rate_limit.")
		} else if i := strings.Index(path, "."); i >= 0 {
			path = path[i+1:]
		}
		// The stand-in limit is rate_limits[0]; the file's list starts
		// at [1] of the combined list.
		var n int
		if _, err := fmt.Sscanf(path, "rate_limits[%d]", &n); err == nil && n > 0 {
			path = fmt.Sprintf("rate_limits[%d]%s", n-1, path[strings.Index(path, "]")+1:])
		}
		out = append(out, &rules.Error{File: where, Path: path, Msg: re.Msg})
	}
	return out
}

func (e *Extensions) domain(name string) *domainExt {
	if e == nil {
		return nil
	}
	return e.domains[name]
}

// limit returns the descriptor fields for a pushed rate_limit rl named
// name: rl with the domain's defaults (unless it is unlimited, which they
// cannot apply to) and the named limit's fields, and the named limit's
// hash_tag and extra rate_limits.
func (d *domainExt) limit(rl yamlMap, name string, unlimited bool) yamlMap {
	if d == nil {
		return yamlMap{{"rate_limit", rl}}
	}
	if !unlimited {
		rl = withFields(rl, d.defaults)
	}
	l := d.limits[name]
	if name == "" || l == nil {
		return yamlMap{{"rate_limit", rl}}
	}
	rl = withFields(rl, l.fields)
	var out yamlMap
	if l.rateLimits == nil {
		out = yamlMap{{"rate_limit", rl}}
	} else {
		list := []any{rl}
		out = yamlMap{{"rate_limits", append(list, l.rateLimits...)}}
	}
	if l.hashTag != nil {
		out = append(out, kv{"hash_tag", l.hashTag})
	}
	return out
}

// withFields returns m with fields set, each replacing a field of the
// same name.
func withFields(m, fields yamlMap) yamlMap {
	out := slices.Clone(m)
	for _, f := range fields {
		i := slices.IndexFunc(out, func(g kv) bool { return g.k == f.k })
		if i >= 0 {
			out[i] = f
			continue
		}
		out = append(out, f)
	}
	return out
}

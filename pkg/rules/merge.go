package rules

import (
	"errors"
	"fmt"
	"maps"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// mergeDomains combines the domains that several files define into one
// each, as envoyproxy/ratelimit does with MERGE_DOMAIN_CONFIG: the files'
// top-level descriptors are joined in file order (which orders their
// wildcards), and a top-level key and value that two files both define is
// refused, as it is within one file. Descriptors below the top level stay
// with their file. The merged domain names the first file as its own.
func mergeDomains(domains []*Domain) ([]*Domain, error) {
	var out []*Domain
	byName := map[string]*Domain{}
	// origin is the file each top-level descriptor of a merged domain came
	// from, for the duplicate message.
	origin := map[*node]string{}
	var errs []error
	for _, d := range domains {
		if d == nil {
			continue
		}
		m, seen := byName[d.Name]
		if !seen {
			m = &Domain{Name: d.Name, File: d.File, Line: d.Line, Source: d.Source, rules: append([]*Rule(nil), d.rules...)}
			m.root = node{
				exact: maps.Clone(d.root.exact),
				keys:  maps.Clone(d.root.keys),
				wild:  append([]wildcard(nil), d.root.wild...),
			}
			for _, n := range m.root.exact {
				origin[n] = d.File
			}
			for _, n := range m.root.keys {
				origin[n] = d.File
			}
			byName[d.Name] = m
			out = append(out, m)
			continue
		}
		errs = append(errs, mergeInto(m, d, origin)...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// mergeInto adds d's top-level descriptors and rules to m.
func mergeInto(m, d *Domain, origin map[*node]string) []error {
	var errs []error
	dup := func(what string, first, again *node) {
		errs = append(errs, &Error{File: d.File, Line: again.line, Path: "descriptors",
			Msg: fmt.Sprintf("duplicate descriptor %s in domain %q (first in %s:%d; want each top-level key and value in one file of the domain)",
				what, d.Name, origin[first], first.line)})
	}
	for e, n := range d.root.exact {
		if first := m.root.exact[e]; first != nil {
			dup(fmt.Sprintf("key %q value %q", e.Key, e.Value), first, n)
			continue
		}
		if m.root.exact == nil {
			m.root.exact = make(map[algo.Entry]*node)
		}
		m.root.exact[e] = n
		origin[n] = d.File
	}
	for k, n := range d.root.keys {
		if first := m.root.keys[k]; first != nil {
			dup(fmt.Sprintf("key %q", k), first, n)
			continue
		}
		if m.root.keys == nil {
			m.root.keys = make(map[string]*node)
		}
		m.root.keys[k] = n
		origin[n] = d.File
	}
	if len(errs) > 0 {
		return errs
	}
	m.root.wild = append(m.root.wild, d.root.wild...)
	m.rules = append(m.rules, d.rules...)
	return nil
}

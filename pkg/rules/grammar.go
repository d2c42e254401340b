package rules

import (
	"errors"
	"fmt"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// maxDepth bounds descriptor nesting. Requests carry a handful of entries;
// the bound keeps a self-referencing alias from recursing until the node
// budget is spent with ever longer YAML paths.
const maxDepth = 32

// Domain is one parsed rule file: a domain and its compiled match tree.
// It is immutable once returned by Parse.
type Domain struct {
	// Name is the domain, as requests name it.
	Name string
	// File is the file name given to Parse.
	File string
	// Line is the line of the domain field.
	Line int
	// Source says where the domain came from, for /debug/config and
	// explain: Parse records its file; a config source that parses what
	// it receives (xDS) replaces it with its own before building a
	// snapshot.
	Source Source

	root  node
	rules []*Rule
}

// Source types.
const (
	SourceFile = "file"
	SourceXDS  = "xds"
)

// Source is where a domain's rules came from: a file, or an xDS resource
// at the version the management server gave the push that carried it.
type Source struct {
	Type    string `json:"type"`
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
}

// String renders the source for logs and explain: "file:/etc/x.yaml",
// "xds:name@v3".
func (s Source) String() string {
	if s.Version == "" {
		return s.Type + ":" + s.Name
	}
	return s.Type + ":" + s.Name + "@" + s.Version
}

// Rules returns the domain's rules in file order. The caller must not
// modify them.
func (d *Domain) Rules() []*Rule { return d.rules }

// Parse parses and validates one rule file. name is used in error messages
// and as Domain.File. On failure it returns every problem found, joined with
// errors.Join, each an *Error formatted as "file:line: yaml.path: problem
// (want …)".
func Parse(name string, data []byte, opts Options) (*Domain, error) {
	p := &parser{reader: reader{file: name}, opts: opts}
	d := p.parse(data)
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return d, nil
}

// parser is the grammar: envoyproxy/ratelimit's rule file and our
// extensions (docs/architecture.md#config-sources), read through the
// reader, compiled into a match tree of Rules.
type parser struct {
	reader
	opts Options

	domain string
	rules  []*Rule
}

// rootWant is what a rule file must be.
const rootWant = "a mapping with domain and descriptors"

func (p *parser) parse(data []byte) *Domain {
	root := p.decode(data, rootWant, "one domain per file")
	if root == nil {
		return nil
	}
	root = p.deref(root)
	if root == nil {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		p.errorf(root.Line, "", "got %s (want %s)", describe(root), rootWant)
		return nil
	}
	f := p.fields(root, "", rootFields)
	d := &Domain{File: p.file, Line: root.Line, Source: Source{Type: SourceFile, Name: p.file}}
	if n, ok := f["domain"]; ok {
		d.Line = n.Line
		if s, ok := p.str(n, "domain"); ok {
			if s == "" {
				p.errorf(n.Line, "domain", "empty (want the domain name requests use)")
			}
			d.Name = s
		}
	} else {
		p.errorf(root.Line, "domain", "missing (want the domain name requests use)")
	}
	p.domain = d.Name
	if n, ok := f["descriptors"]; ok {
		p.descriptorList(n, "descriptors", &d.root, nil, -1)
	}
	d.rules = p.rules
	return d
}

// Field sets of each mapping, in the order error messages list them.
var (
	rootFields       = []string{"domain", "descriptors"}
	descriptorFields = []string{"key", "value", "rate_limit", "rate_limits", "descriptors", "shadow_mode",
		"quota_mode", "detailed_metric", "value_to_metric", "share_threshold", "hash_tag", "metadata"}
	rateLimitFields = []string{"unit", "requests_per_unit", "unit_multiplier", "algorithm", "burst",
		"sub_windows", "unlimited", "name", "replaces", "lease", "warmup", "on_limit", "max_delay", "cost"}
	replacesFields = []string{"name"}
)

// ancestor is what a descriptor passes down to its nested descriptors.
type ancestor struct {
	key           string
	seg           string // "key" or "key_value", the stats path segment
	shared        string // the wildcard pattern when share_threshold is set
	valueToMetric bool
}

// descriptorList parses a descriptors list into the children of parent.
// hashTag is the inherited hash_tag entry index (-1 none).
func (p *parser) descriptorList(n *yaml.Node, path string, parent *node, anc []ancestor, hashTag int) {
	if len(anc) >= maxDepth {
		p.errorf(n.Line, path, "descriptors nested deeper than %d levels (want fewer levels)", maxDepth)
		return
	}
	items := p.sequence(n, path, "a list of descriptors")
	for i, item := range items {
		if p.overBudget {
			return
		}
		p.descriptor(item, fmt.Sprintf("%s[%d]", path, i), parent, anc, hashTag)
	}
}

// descriptor parses one descriptor into a child of parent: its own entry,
// the hash tag its rules and nested descriptors use, its rule and its
// nested descriptors, in that order (which is the order of its errors).
func (p *parser) descriptor(item *yaml.Node, path string, parent *node, anc []ancestor, hashTag int) {
	n := p.mapping(item, path, "a descriptor mapping with key")
	if n == nil {
		return
	}
	f := p.fields(n, path, descriptorFields)
	h := p.descriptorHead(f, item.Line, path)

	child := &node{line: n.Line, file: p.file}
	if h.keyOK {
		p.insert(parent, child, h.key, h.value, path)
	}
	// Children of different siblings would share anc's backing array if
	// this appended to it: copy.
	chain := make([]ancestor, len(anc)+1)
	copy(chain, anc)
	chain[len(anc)] = h.ancestor()

	if hn, ok := f["hash_tag"]; ok {
		if tag, ok := p.str(hn, path+".hash_tag"); ok {
			hashTag = p.hashTagIndex(tag, chain, hn.Line, path+".hash_tag")
		}
	}
	if r := p.descriptorRule(f, n.Line, path, h, chain, hashTag); r != nil {
		child.rule = r
		p.rules = append(p.rules, r)
	}
	if dn, ok := f["descriptors"]; ok {
		p.descriptorList(dn, path+".descriptors", child, chain, hashTag)
	}
}

// descriptorHead is what a descriptor says about its own entry and about
// how its rule behaves.
type descriptorHead struct {
	key, value string
	// keyOK is false when the key is missing or bad; the descriptor then
	// joins no tree and has no rule.
	keyOK                                         bool
	shadow, quota, detailed, valueToMetric, share bool
}

// descriptorHead reads a descriptor's key, value and flags; line is the
// descriptor's, for a missing key.
func (p *parser) descriptorHead(f map[string]*yaml.Node, line int, path string) descriptorHead {
	var h descriptorHead
	if kn, ok := f["key"]; ok {
		if h.key, h.keyOK = p.str(kn, path+".key"); h.keyOK && h.key == "" {
			p.errorf(kn.Line, path+".key", "empty (want the descriptor entry key)")
			h.keyOK = false
		}
	} else {
		p.errorf(line, path+".key", "missing (want the descriptor entry key)")
	}
	if vn, ok := f["value"]; ok {
		h.value, _ = p.str(vn, path+".value")
	}
	flag := func(name string) bool {
		if fn, ok := f[name]; ok {
			b, _ := p.boolean(fn, path+"."+name)
			return b
		}
		return false
	}
	h.shadow, h.quota = flag("shadow_mode"), flag("quota_mode")
	h.detailed, h.valueToMetric = flag("detailed_metric"), flag("value_to_metric")
	h.share = flag("share_threshold")
	if h.share && !h.wildcard() {
		p.errorf(f["share_threshold"].Line, path+".share_threshold",
			"set on value %q (want a wildcard value, one with a \"*\")", h.value)
	}
	return h
}

func (h descriptorHead) wildcard() bool { return isWildcard(h.value) }

// isWildcard reports whether a descriptor value is a pattern (see glob): a
// "*" anywhere makes it one.
func isWildcard(value string) bool { return strings.Contains(value, "*") }

// ancestor is what the descriptor passes down to its nested descriptors.
func (h descriptorHead) ancestor() ancestor {
	seg := h.key
	if h.value != "" {
		seg = h.key + "_" + h.value
	}
	a := ancestor{key: h.key, seg: seg, valueToMetric: h.valueToMetric}
	if h.share && h.wildcard() {
		a.shared = h.value
	}
	return a
}

// descriptorRule parses the descriptor's rate_limit or rate_limits into
// its rule, or returns nil when it has neither or they are invalid. line
// is the descriptor's; chain is its path in the tree, itself last.
func (p *parser) descriptorRule(f map[string]*yaml.Node, line int, path string, h descriptorHead, chain []ancestor, hashTag int) *Rule {
	rl, hasRL := f["rate_limit"]
	rls, hasRLs := f["rate_limits"]
	if hasRL && hasRLs {
		p.errorf(rls.Line, path+".rate_limits", "set together with rate_limit (want one of them)")
	}
	if !hasRL && !hasRLs {
		if mn, has := f["metadata"]; has {
			// Validate it anyway: metadata only travels with a rule's status.
			p.metadata(mn, path+".metadata")
		}
		return nil
	}
	r := &Rule{
		Domain:         p.domain,
		File:           p.file,
		Line:           line,
		ShadowMode:     h.shadow,
		QuotaMode:      h.quota,
		DetailedMetric: h.detailed,
		HashTag:        hashTag,
	}
	var ok bool
	if hasRL {
		ok = p.singleLimit(rl, path+".rate_limit", r)
	} else {
		ok = p.limitList(rls, path+".rate_limits", r)
	}
	if mn, has := f["metadata"]; has {
		r.Metadata = p.metadata(mn, path+".metadata")
	}
	if !ok || !h.keyOK || (hasRL && hasRLs) {
		return nil
	}
	p.finishRule(r, chain)
	return r
}

// insert adds child under parent, rejecting a second descriptor with the
// same key and value at one level (envoyproxy/ratelimit's "duplicate
// descriptor composite key").
func (p *parser) insert(parent, child *node, key, value, path string) {
	var first *node
	if value == "" {
		first = parent.keys[key]
	} else {
		first = parent.exact[algo.Entry{Key: key, Value: value}]
	}
	if first != nil {
		what := fmt.Sprintf("key %q", key)
		if value != "" {
			what += fmt.Sprintf(" value %q", value)
		}
		p.errorf(child.line, path, "duplicate descriptor %s (first at line %d; want each key and value once per level)", what, first.line)
		return
	}
	if value == "" {
		if parent.keys == nil {
			parent.keys = make(map[string]*node)
		}
		parent.keys[key] = child
		return
	}
	if parent.exact == nil {
		parent.exact = make(map[algo.Entry]*node)
	}
	// A wildcard is also reachable by its literal value, as upstream's map
	// lookup of "key_prefix*" finds it.
	parent.exact[algo.Entry{Key: key, Value: value}] = child
	if isWildcard(value) {
		parent.wild = append(parent.wild, wildcard{key: key, glob: newGlob(value), next: child})
	}
}

func (p *parser) hashTagIndex(tag string, path []ancestor, line int, yp string) int {
	idx := -1
	for i, a := range path {
		if a.key != tag {
			continue
		}
		if idx >= 0 {
			p.errorf(line, yp, "key %q appears at levels %d and %d of this descriptor's path (want a key that appears once)", tag, idx, i)
			return -1
		}
		idx = i
	}
	if idx < 0 {
		keys := make([]string, len(path))
		for i, a := range path {
			keys[i] = a.key
		}
		p.errorf(line, yp, "unknown key %q (want the key of this descriptor or of an enclosing one: %s)", tag, strings.Join(keys, "|"))
	}
	return idx
}

// finishRule fills what depends on the rule's position in the tree.
func (p *parser) finishRule(r *Rule, path []ancestor) {
	var b strings.Builder
	b.WriteString(p.domain)
	for i, a := range path {
		b.WriteByte('.')
		b.WriteString(a.seg)
		if a.shared != "" {
			r.shared = append(r.shared, sharedLevel{level: i, pattern: a.shared})
			r.ShareThreshold = true
		}
		r.ValueToMetric = r.ValueToMetric || a.valueToMetric
	}
	r.Path = b.String()
	r.depth = len(path)
	if r.ID == "" {
		r.ID = r.Path
	}
	for i := range r.Limits {
		if w := r.Limits[i].Warmup; w != nil {
			w.Anchor = anchorID(r, &r.Limits[i])
		}
	}
}

// metadata converts a metadata mapping to plain Go values that both JSON and
// protobuf Struct can carry.
func (p *parser) metadata(n *yaml.Node, path string) map[string]any {
	m := p.mapping(n, path, "a mapping")
	if m == nil {
		return nil
	}
	v, _ := p.plain(m, path, 0).(map[string]any)
	return v
}

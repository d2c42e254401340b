package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// maxNodes bounds the YAML nodes one file may expand to. Aliases let a small
// file reference the same subtree many times; without a bound a few lines
// could make the parser build an exponential tree.
const maxNodes = 200_000

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

	root  node
	rules []*Rule
}

// Rules returns the domain's rules in file order. The caller must not
// modify them.
func (d *Domain) Rules() []*Rule { return d.rules }

// Parse parses and validates one rule file. name is used in error messages
// and as Domain.File. On failure it returns every problem found, joined with
// errors.Join, each an *Error formatted as "file:line: yaml.path: problem
// (want …)".
func Parse(name string, data []byte, opts Options) (*Domain, error) {
	p := &parser{file: name, opts: opts}
	d := p.parse(data)
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return d, nil
}

type parser struct {
	file  string
	opts  Options
	errs  []error
	nodes int
	// overBudget is set once the node budget is spent; parsing then stops
	// descending so that a hostile file costs bounded time.
	overBudget bool

	domain string
	rules  []*Rule
}

func (p *parser) errorf(line int, path, format string, args ...any) {
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

var yamlErrLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError reports a YAML decoding error at the line it names.
func (p *parser) syntaxError(err error) {
	for _, msg := range strings.Split(err.Error(), "\n") {
		line := 0
		if m := yamlErrLine.FindStringSubmatch(msg); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = m[2]
		} else {
			msg = strings.TrimPrefix(msg, "yaml: ")
		}
		p.errorf(line, "", "invalid YAML: %s", strings.TrimSpace(msg))
	}
}

// decode reads the file's single YAML document. The decoder is third-party
// code fed with user input, so a panic in it becomes an error.
func (p *parser) decode(data []byte) (root *yaml.Node) {
	defer func() {
		if r := recover(); r != nil {
			p.errorf(0, "", "invalid YAML: decoder failed: %v", r)
			root = nil
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.errorf(0, "", "empty file (want a mapping with domain and descriptors)")
		} else {
			p.syntaxError(err)
		}
		return nil
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		p.errorf(extra.Line, "", "several YAML documents (want one domain per file)")
		return nil
	case !errors.Is(err, io.EOF):
		p.syntaxError(err)
		return nil
	}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		return doc.Content[0]
	}
	return &doc
}

func (p *parser) parse(data []byte) *Domain {
	root := p.decode(data)
	if root == nil {
		return nil
	}
	root = p.deref(root)
	if root == nil {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		p.errorf(root.Line, "", "got %s (want a mapping with domain and descriptors)", describe(root))
		return nil
	}
	f := p.fields(root, "", rootFields)
	d := &Domain{File: p.file, Line: root.Line}
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
		"unlimited", "name", "replaces"}
	replacesFields = []string{"name"}
)

// deref follows aliases and counts the node against the budget. It returns
// nil once the budget is spent.
func (p *parser) deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	if n == nil || n.Kind == yaml.AliasNode {
		return nil
	}
	p.nodes++
	if p.nodes > maxNodes {
		if !p.overBudget {
			p.overBudget = true
			p.errorf(n.Line, "", "file expands to more than %d YAML nodes (want fewer aliases or descriptors)", maxNodes)
		}
		return nil
	}
	return n
}

// fields returns a mapping's values by key, reporting unknown and duplicate
// keys. Merge keys ("<<") are honoured: explicit keys override merged ones.
func (p *parser) fields(n *yaml.Node, path string, allowed []string) map[string]*yaml.Node {
	out := make(map[string]*yaml.Node, len(n.Content)/2)
	seen := make(map[string]int, len(n.Content)/2)
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if k.Kind != yaml.ScalarNode {
			p.errorf(k.Line, path, "got %s as a key (want one of %s)", describe(k), strings.Join(allowed, "|"))
			continue
		}
		fp := join(path, k.Value)
		if !contains(allowed, k.Value) {
			p.errorf(k.Line, fp, "unknown field (want one of %s)", strings.Join(allowed, "|"))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			p.errorf(k.Line, fp, "duplicate field (first at line %d)", first)
			continue
		}
		seen[k.Value] = k.Line
		out[k.Value] = v
	}
	for _, m := range merges {
		p.merge(m, path, allowed, out, 0)
	}
	return out
}

func (p *parser) merge(m *yaml.Node, path string, allowed []string, out map[string]*yaml.Node, depth int) {
	line := m.Line
	m = p.deref(m)
	if m == nil || depth > 10 {
		return
	}
	switch m.Kind {
	case yaml.MappingNode:
		for k, v := range p.fields(m, path, allowed) {
			if _, ok := out[k]; !ok {
				out[k] = v
			}
		}
	case yaml.SequenceNode:
		for _, c := range m.Content {
			p.merge(c, path, allowed, out, depth+1)
		}
	default:
		p.errorf(line, join(path, "<<"), "got %s (want a mapping or a list of mappings to merge)", describe(m))
	}
}

// str reads a scalar as its literal text, as envoyproxy/ratelimit's YAML
// library does for string fields (so value: 500 is "500"); null is "".
func (p *parser) str(n *yaml.Node, path string) (string, bool) {
	line := n.Line
	n = p.deref(n)
	if n == nil {
		return "", false
	}
	if n.Kind != yaml.ScalarNode {
		p.errorf(line, path, "got %s (want a string)", describe(n))
		return "", false
	}
	if n.ShortTag() == "!!null" {
		return "", true
	}
	return n.Value, true
}

func (p *parser) boolean(n *yaml.Node, path string) (bool, bool) {
	line := n.Line
	n = p.deref(n)
	if n == nil {
		return false, false
	}
	var b bool
	if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
		p.errorf(line, path, "got %s (want true or false)", describe(n))
		return false, false
	}
	return b, true
}

// integer reads an integer in [lo, hi]; quoted numbers are rejected as
// envoyproxy/ratelimit's decoder rejects them.
func (p *parser) integer(n *yaml.Node, path string, lo, hi int64, want string) (int64, bool) {
	line := n.Line
	n = p.deref(n)
	if n == nil {
		return 0, false
	}
	var v int64
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		p.errorf(line, path, "got %s (want %s)", describe(n), want)
		return 0, false
	}
	if v < lo || v > hi {
		p.errorf(line, path, "%d is out of range (want %s)", v, want)
		return 0, false
	}
	return v, true
}

// mapping dereferences n and checks it is a mapping; null is an error too,
// because an empty block is almost always a mistake.
func (p *parser) mapping(n *yaml.Node, path, want string) *yaml.Node {
	line := n.Line
	n = p.deref(n)
	if n == nil {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(line, path, "got %s (want %s)", describe(n), want)
		return nil
	}
	return n
}

// sequence dereferences n and checks it is a list; null is an empty list.
func (p *parser) sequence(n *yaml.Node, path, want string) []*yaml.Node {
	line := n.Line
	n = p.deref(n)
	if n == nil {
		return nil
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(line, path, "got %s (want %s)", describe(n), want)
		return nil
	}
	return n.Content
}

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

func (p *parser) descriptor(item *yaml.Node, path string, parent *node, anc []ancestor, hashTag int) {
	line := item.Line
	n := p.mapping(item, path, "a descriptor mapping with key")
	if n == nil {
		return
	}
	f := p.fields(n, path, descriptorFields)

	var key, value string
	keyOK := false
	if kn, ok := f["key"]; ok {
		if key, keyOK = p.str(kn, path+".key"); keyOK && key == "" {
			p.errorf(kn.Line, path+".key", "empty (want the descriptor entry key)")
			keyOK = false
		}
	} else {
		p.errorf(line, path+".key", "missing (want the descriptor entry key)")
	}
	if vn, ok := f["value"]; ok {
		value, _ = p.str(vn, path+".value")
	}
	flag := func(name string) bool {
		if fn, ok := f[name]; ok {
			b, _ := p.boolean(fn, path+"."+name)
			return b
		}
		return false
	}
	shadow, quota := flag("shadow_mode"), flag("quota_mode")
	detailed, valueToMetric := flag("detailed_metric"), flag("value_to_metric")
	share := flag("share_threshold")

	wildcard := strings.HasSuffix(value, "*")
	if share && !wildcard {
		p.errorf(f["share_threshold"].Line, path+".share_threshold",
			"set on value %q (want a wildcard value ending in \"*\")", value)
	}

	child := &node{line: n.Line}
	if keyOK {
		p.insert(parent, child, key, value, path)
	}

	seg := key
	if value != "" {
		seg = key + "_" + value
	}
	self := ancestor{key: key, seg: seg, valueToMetric: valueToMetric}
	if share && wildcard {
		self.shared = value
	}
	// The slice is never appended to by a sibling after this point, but
	// children of different siblings would share its backing array: copy.
	path2 := make([]ancestor, len(anc)+1)
	copy(path2, anc)
	path2[len(anc)] = self

	if hn, ok := f["hash_tag"]; ok {
		if tag, ok := p.str(hn, path+".hash_tag"); ok {
			hashTag = p.hashTagIndex(tag, path2, hn.Line, path+".hash_tag")
		}
	}

	rl, hasRL := f["rate_limit"]
	rls, hasRLs := f["rate_limits"]
	if hasRL && hasRLs {
		p.errorf(rls.Line, path+".rate_limits", "set together with rate_limit (want one of them)")
	}
	if hasRL || hasRLs {
		r := &Rule{
			Domain:         p.domain,
			File:           p.file,
			Line:           n.Line,
			ShadowMode:     shadow,
			QuotaMode:      quota,
			DetailedMetric: detailed,
			HashTag:        hashTag,
		}
		ok := true
		if hasRL {
			ok = p.singleLimit(rl, path+".rate_limit", r)
		} else {
			ok = p.limitList(rls, path+".rate_limits", r)
		}
		if mn, has := f["metadata"]; has {
			r.Metadata = p.metadata(mn, path+".metadata")
		}
		if ok && keyOK && !(hasRL && hasRLs) {
			p.finishRule(r, path2)
			child.rule = r
			p.rules = append(p.rules, r)
		}
	} else if mn, has := f["metadata"]; has {
		// Validate it anyway: metadata only travels with a rule's status.
		p.metadata(mn, path+".metadata")
	}

	if dn, ok := f["descriptors"]; ok {
		p.descriptorList(dn, path+".descriptors", child, path2, hashTag)
	}
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
	if strings.HasSuffix(value, "*") {
		parent.wild = append(parent.wild, wildcard{key: key, prefix: strings.TrimSuffix(value, "*"), next: child})
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
}

// singleLimit parses a rate_limit block, which may be unlimited.
func (p *parser) singleLimit(n *yaml.Node, path string, r *Rule) bool {
	m := p.mapping(n, path, "a mapping with unit and requests_per_unit, or unlimited: true")
	if m == nil {
		return false
	}
	f := p.fields(m, path, rateLimitFields)
	unlimited := false
	if un, ok := f["unlimited"]; ok {
		unlimited, _ = p.boolean(un, path+".unlimited")
	}
	name := ""
	if nn, ok := f["name"]; ok {
		name, _ = p.str(nn, path+".name")
	}
	r.ID = name
	if unlimited {
		ok := true
		for _, k := range []string{"unit", "requests_per_unit", "unit_multiplier", "algorithm", "burst"} {
			if kn, has := f[k]; has {
				p.errorf(kn.Line, path+"."+k, "set together with unlimited: true (want either unlimited or a limit)")
				ok = false
			}
		}
		r.Unlimited = true
		r.Replaces = p.replaces(f, path, []string{name}, r.Replaces)
		return ok
	}
	l, ok := p.limit(f, m.Line, path, name)
	if !ok {
		p.replaces(f, path, []string{name}, nil)
		return false
	}
	r.Limits = []Limit{l}
	r.Replaces = p.replaces(f, path, []string{name}, r.Replaces)
	return true
}

// limitList parses the rate_limits extension: several limits, all applied.
func (p *parser) limitList(n *yaml.Node, path string, r *Rule) bool {
	items := p.sequence(n, path, "a list of rate limits")
	if len(items) == 0 {
		p.errorf(n.Line, path, "empty (want at least one rate limit)")
		return false
	}
	ok := true
	type parsed struct {
		f    map[string]*yaml.Node
		path string
	}
	var all []parsed
	var names []string
	var positions []int // list position of each parsed limit in r.Limits
	for i, item := range items {
		ip := fmt.Sprintf("%s[%d]", path, i)
		m := p.mapping(item, ip, "a mapping with unit and requests_per_unit")
		if m == nil {
			ok = false
			continue
		}
		f := p.fields(m, ip, rateLimitFields)
		if un, has := f["unlimited"]; has {
			p.errorf(un.Line, ip+".unlimited", "not allowed in rate_limits (want rate_limit: {unlimited: true} instead of a list)")
			ok = false
		}
		name := ""
		if nn, has := f["name"]; has {
			name, _ = p.str(nn, ip+".name")
		}
		if name != "" {
			names = append(names, name)
		}
		l, lok := p.limit(f, m.Line, ip, name)
		if !lok {
			ok = false
		} else {
			for j, prev := range r.Limits {
				if prev.Policy.SharesCounter(l.Policy) {
					p.errorf(m.Line, ip, "same algorithm (%s) and period as %s[%d], so both would count in one key (want a different algorithm or period, or one limit)",
						l.Policy.Algorithm, path, positions[j])
					ok = false
				}
			}
			r.Limits = append(r.Limits, l)
			positions = append(positions, i)
		}
		all = append(all, parsed{f, ip})
	}
	for _, a := range all {
		r.Replaces = p.replaces(a.f, a.path, names, r.Replaces)
	}
	return ok
}

// limit parses the numeric part of a rate limit.
func (p *parser) limit(f map[string]*yaml.Node, line int, path, name string) (Limit, bool) {
	l := Limit{Name: name, UnitMultiplier: 1}
	ok := true

	if un, has := f["unit"]; has {
		if s, sok := p.str(un, path+".unit"); sok {
			u, err := algo.ParseUnit(strings.ToLower(s))
			if err != nil {
				p.errorf(un.Line, path+".unit", "unknown unit %q (want %s)", s, algo.UnitNames())
				ok = false
			}
			l.Unit = u
		} else {
			ok = false
		}
	} else {
		p.errorf(line, path+".unit", "missing (want %s)", algo.UnitNames())
		ok = false
	}
	unitUS := l.Unit.Micros()

	if rn, has := f["requests_per_unit"]; has {
		v, vok := p.integer(rn, path+".requests_per_unit", 0, math.MaxUint32, "an integer 0..4294967295; 0 blocks every request")
		l.RequestsPerUnit = uint32(v)
		ok = ok && vok
	} else {
		p.errorf(line, path+".requests_per_unit", "missing (want an integer 0..4294967295; 0 blocks every request)")
		ok = false
	}

	if mn, has := f["unit_multiplier"]; has {
		v, vok := p.integer(mn, path+".unit_multiplier", 1, math.MaxUint32, "an integer 1..4294967295")
		if vok && unitUS > 0 && v > math.MaxInt64/unitUS {
			p.errorf(mn.Line, path+".unit_multiplier", "%d %ss overflow the period (want at most %d)", v, l.Unit, math.MaxInt64/unitUS)
			vok = false
		}
		l.UnitMultiplier = uint32(v)
		ok = ok && vok
	}

	alg, algOK := p.opts.defaultAlgorithm(), true
	if an, has := f["algorithm"]; has {
		var s string
		if s, algOK = p.str(an, path+".algorithm"); algOK {
			a, err := algo.ParseAlgorithm(strings.ToLower(s))
			if err != nil {
				p.errorf(an.Line, path+".algorithm", "unknown algorithm %q (want %s)", s, algo.AlgorithmNames())
				algOK = false
			}
			alg = a
		}
		ok = ok && algOK
	}

	var burst int64
	if bn, has := f["burst"]; has {
		v, vok := p.integer(bn, path+".burst", 1, math.MaxUint32, "an integer 1..4294967295")
		if vok && algOK && !alg.UsesBurst() {
			p.errorf(bn.Line, path+".burst", "set for algorithm %s (want burst only with token_bucket or gcra)", alg)
			vok = false
		}
		burst = v
		ok = ok && vok
	}
	if !ok {
		return l, false
	}

	if alg == algo.SlidingLog && int64(l.RequestsPerUnit) > p.opts.slidingLogCap() {
		at := line
		if rn := f["requests_per_unit"]; rn != nil {
			at = rn.Line
		}
		p.errorf(at, path+".requests_per_unit", "%d is above the sliding_log cap of %d, the log keeps one entry per hit (want at most %d, or another algorithm)",
			l.RequestsPerUnit, p.opts.slidingLogCap(), p.opts.slidingLogCap())
		return l, false
	}

	if burst == 0 && alg.UsesBurst() {
		burst = int64(l.RequestsPerUnit)
	}
	l.Policy = algo.Policy{
		Algorithm: alg,
		Limit:     int64(l.RequestsPerUnit),
		Period:    unitUS * int64(l.UnitMultiplier),
		Burst:     burst,
	}
	return l, p.validatePolicy(l.Policy, line, path)
}

// validatePolicy defers to the algorithms' own view of what they compute
// exactly; errors.Join'ed reasons become one problem each.
func (p *parser) validatePolicy(pol algo.Policy, line int, path string) bool {
	err := pol.ValidateWithLogCap(p.opts.slidingLogCap())
	if err == nil {
		return true
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		p.errorf(line, path, "%v", e)
	}
	return false
}

// replaces parses a rate limit's replaces list and appends the names to
// dst. own are the names of the rule's limits, which it must not replace.
func (p *parser) replaces(f map[string]*yaml.Node, path string, own []string, dst []string) []string {
	n, ok := f["replaces"]
	if !ok {
		return dst
	}
	path += ".replaces"
	for i, item := range p.sequence(n, path, "a list of {name: …}") {
		ip := fmt.Sprintf("%s[%d]", path, i)
		m := p.mapping(item, ip, "a mapping with name")
		if m == nil {
			continue
		}
		rf := p.fields(m, ip, replacesFields)
		nn, has := rf["name"]
		if !has {
			p.errorf(m.Line, ip+".name", "missing (want the name of another rate limit)")
			continue
		}
		name, sok := p.str(nn, ip+".name")
		switch {
		case !sok:
		case name == "":
			p.errorf(nn.Line, ip+".name", "empty (want the name of another rate limit)")
		case contains(own, name):
			p.errorf(nn.Line, ip+".name", "replaces its own rate limit %q (want the name of another rate limit)", name)
		default:
			dst = append(dst, name)
		}
	}
	return dst
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

func (p *parser) plain(n *yaml.Node, path string, depth int) any {
	line := n.Line
	n = p.deref(n)
	if n == nil {
		return nil
	}
	if depth > 32 {
		p.errorf(line, path, "nested too deeply (want at most 32 levels)")
		return nil
	}
	switch n.Kind {
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := p.deref(n.Content[i])
			if k == nil {
				continue
			}
			if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
				p.errorf(k.Line, path, "got %s as a key (want a string)", describe(k))
				continue
			}
			if _, dup := out[k.Value]; dup {
				p.errorf(k.Line, join(path, k.Value), "duplicate field")
				continue
			}
			out[k.Value] = p.plain(n.Content[i+1], join(path, k.Value), depth+1)
		}
		return out
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for i, c := range n.Content {
			out = append(out, p.plain(c, fmt.Sprintf("%s[%d]", path, i), depth+1))
		}
		return out
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return nil
		case "!!bool":
			var b bool
			if n.Decode(&b) == nil {
				return b
			}
		case "!!int":
			var i int64
			if n.Decode(&i) == nil {
				return i
			}
			p.errorf(line, path, "integer %s out of range (want a 64-bit integer)", n.Value)
			return nil
		case "!!float":
			var f float64
			if n.Decode(&f) == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
				return f
			}
			p.errorf(line, path, "got %s (want a finite number)", n.Value)
			return nil
		}
		return n.Value
	}
	return nil
}

// describe names a node's kind for error messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.DocumentNode:
		return "a document"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!str":
			return strconv.Quote(n.Value)
		}
		return n.Value
	}
	return "an unknown node"
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

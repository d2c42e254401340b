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
)

// maxNodes bounds the YAML nodes one file may expand to. Aliases let a small
// file reference the same subtree many times; without a bound a few lines
// could make the parser build an exponential tree.
const maxNodes = 200_000

// reader walks one file's YAML node tree for the grammar: it follows
// aliases within the node budget, reads mappings with unknown and duplicate
// fields reported, reads typed scalars, and collects every problem as an
// *Error ("file:line: yaml.path: problem (want …)"), so that one pass
// reports them all. It knows nothing of descriptors or limits; each read
// takes the YAML path and the "want" wording from its caller.
type reader struct {
	file  string
	errs  []error
	nodes int
	// overBudget is set once the node budget is spent; parsing then stops
	// descending so that a hostile file costs bounded time.
	overBudget bool
}

func (r *reader) errorf(line int, path, format string, args ...any) {
	r.errs = append(r.errs, &Error{File: r.file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

var yamlErrLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError reports a YAML decoding error of data at the line where
// decoding fails (failingLine).
func (r *reader) syntaxError(data []byte, err error) {
	for _, msg := range strings.Split(err.Error(), "\n") {
		line := 0
		if m := yamlErrLine.FindStringSubmatch(msg); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = m[2]
			line = failingLine(data, line, msg)
		} else {
			msg = strings.TrimPrefix(msg, "yaml: ")
		}
		r.errorf(line, "", "invalid YAML: %s", strings.TrimSpace(msg))
	}
}

// failingLineBudget bounds the bytes failingLine decodes in all, so that
// a large broken file costs bounded time; past it the decoder's own line
// stands.
const failingLineBudget = 32 << 20

// failingLine returns the first line of data at which decoding fails with
// msg, searching from the line the decoder named. The decoder names the
// line where the enclosing block starts (and, for a parser error, the one
// before it), not the line that breaks it: a key indented one space too
// few on line 6 is reported at line 2. The first prefix of data, ending at
// line k >= from, that fails to decode with the same message ends at the
// line that broke it. A prefix cut inside a multi-line scalar or flow
// collection fails otherwise and is passed over.
func failingLine(data []byte, from int, msg string) int {
	msg = strings.TrimSpace(msg)
	end, line, spent := 0, 0, 0
	for end < len(data) {
		next := bytes.IndexByte(data[end:], '\n')
		if next < 0 {
			end = len(data)
		} else {
			end += next + 1
		}
		line++
		if line < from {
			continue
		}
		if spent += end; spent > failingLineBudget {
			break
		}
		if m := yamlErrLine.FindStringSubmatch(firstDecodeError(data[:end])); m != nil && strings.TrimSpace(m[2]) == msg {
			return line
		}
	}
	return from
}

// firstDecodeError decodes every document of data and returns the first
// error's text, or "" when all decode.
func firstDecodeError(data []byte) (msg string) {
	defer func() {
		if v := recover(); v != nil {
			msg = ""
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return ""
		}
		if err != nil {
			return strings.SplitN(err.Error(), "\n", 2)[0]
		}
	}
}

// decode reads the file's single YAML document. want says what an empty
// file lacks and wantOne what a file of several documents should be. The
// decoder is third-party code fed with user input, so a panic in it becomes
// an error.
func (r *reader) decode(data []byte, want, wantOne string) (root *yaml.Node) {
	defer func() {
		if v := recover(); v != nil {
			r.errorf(0, "", "invalid YAML: decoder failed: %v", v)
			root = nil
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			r.errorf(0, "", "empty file (want %s)", want)
		} else {
			r.syntaxError(data, err)
		}
		return nil
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		r.errorf(extra.Line, "", "several YAML documents (want %s)", wantOne)
		return nil
	case !errors.Is(err, io.EOF):
		r.syntaxError(data, err)
		return nil
	}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		return doc.Content[0]
	}
	return &doc
}

// deref follows aliases and counts the node against the budget. It returns
// nil once the budget is spent.
func (r *reader) deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	if n == nil || n.Kind == yaml.AliasNode {
		return nil
	}
	r.nodes++
	if r.nodes > maxNodes {
		if !r.overBudget {
			r.overBudget = true
			r.errorf(n.Line, "", "file expands to more than %d YAML nodes (want fewer aliases or descriptors)", maxNodes)
		}
		return nil
	}
	return n
}

// fields returns a mapping's values by key, reporting unknown and duplicate
// keys. Merge keys ("<<") are honoured: explicit keys override merged ones.
func (r *reader) fields(n *yaml.Node, path string, allowed []string) map[string]*yaml.Node {
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
			r.errorf(k.Line, path, "got %s as a key (want one of %s)", describe(k), strings.Join(allowed, "|"))
			continue
		}
		fp := join(path, k.Value)
		if !contains(allowed, k.Value) {
			r.errorf(k.Line, fp, "unknown field (want one of %s)", strings.Join(allowed, "|"))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			r.errorf(k.Line, fp, "duplicate field (first at line %d)", first)
			continue
		}
		seen[k.Value] = k.Line
		out[k.Value] = v
	}
	for _, m := range merges {
		r.merge(m, path, allowed, out, 0)
	}
	return out
}

func (r *reader) merge(m *yaml.Node, path string, allowed []string, out map[string]*yaml.Node, depth int) {
	line := m.Line
	m = r.deref(m)
	if m == nil || depth > 10 {
		return
	}
	switch m.Kind {
	case yaml.MappingNode:
		for k, v := range r.fields(m, path, allowed) {
			if _, ok := out[k]; !ok {
				out[k] = v
			}
		}
	case yaml.SequenceNode:
		for _, c := range m.Content {
			r.merge(c, path, allowed, out, depth+1)
		}
	default:
		r.errorf(line, join(path, "<<"), "got %s (want a mapping or a list of mappings to merge)", describe(m))
	}
}

// str reads a scalar as its literal text, as envoyproxy/ratelimit's YAML
// library does for string fields (so value: 500 is "500"); null is "".
func (r *reader) str(n *yaml.Node, path string) (string, bool) {
	line := n.Line
	n = r.deref(n)
	if n == nil {
		return "", false
	}
	if n.Kind != yaml.ScalarNode {
		r.errorf(line, path, "got %s (want a string)", describe(n))
		return "", false
	}
	if n.ShortTag() == "!!null" {
		return "", true
	}
	return n.Value, true
}

func (r *reader) boolean(n *yaml.Node, path string) (bool, bool) {
	line := n.Line
	n = r.deref(n)
	if n == nil {
		return false, false
	}
	var b bool
	if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
		r.errorf(line, path, "got %s (want true or false)", describe(n))
		return false, false
	}
	return b, true
}

// integer reads an integer in [lo, hi]; quoted numbers are rejected as
// envoyproxy/ratelimit's decoder rejects them.
func (r *reader) integer(n *yaml.Node, path string, lo, hi int64, want string) (int64, bool) {
	line := n.Line
	n = r.deref(n)
	if n == nil {
		return 0, false
	}
	var v int64
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		r.errorf(line, path, "got %s (want %s)", describe(n), want)
		return 0, false
	}
	if v < lo || v > hi {
		r.errorf(line, path, "%d is out of range (want %s)", v, want)
		return 0, false
	}
	return v, true
}

// mapping dereferences n and checks it is a mapping; null is an error too,
// because an empty block is almost always a mistake.
func (r *reader) mapping(n *yaml.Node, path, want string) *yaml.Node {
	line := n.Line
	n = r.deref(n)
	if n == nil {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		r.errorf(line, path, "got %s (want %s)", describe(n), want)
		return nil
	}
	return n
}

// sequence dereferences n and checks it is a list; null is an empty list.
func (r *reader) sequence(n *yaml.Node, path, want string) []*yaml.Node {
	line := n.Line
	n = r.deref(n)
	if n == nil {
		return nil
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		r.errorf(line, path, "got %s (want %s)", describe(n), want)
		return nil
	}
	return n.Content
}

// plain converts a node to plain Go values that both JSON and protobuf
// Struct can carry: map[string]any, []any, string, int64, float64, bool or
// nil.
func (r *reader) plain(n *yaml.Node, path string, depth int) any {
	line := n.Line
	n = r.deref(n)
	if n == nil {
		return nil
	}
	if depth > 32 {
		r.errorf(line, path, "nested too deeply (want at most 32 levels)")
		return nil
	}
	switch n.Kind {
	case yaml.MappingNode:
		return r.plainMap(n, path, depth)
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for i, c := range n.Content {
			out = append(out, r.plain(c, fmt.Sprintf("%s[%d]", path, i), depth+1))
		}
		return out
	case yaml.ScalarNode:
		return r.plainScalar(n, line, path)
	}
	return nil
}

func (r *reader) plainMap(n *yaml.Node, path string, depth int) map[string]any {
	out := make(map[string]any, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := r.deref(n.Content[i])
		if k == nil {
			continue
		}
		if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
			r.errorf(k.Line, path, "got %s as a key (want a string)", describe(k))
			continue
		}
		if _, dup := out[k.Value]; dup {
			r.errorf(k.Line, join(path, k.Value), "duplicate field")
			continue
		}
		out[k.Value] = r.plain(n.Content[i+1], join(path, k.Value), depth+1)
	}
	return out
}

// plainScalar converts a scalar by its tag; line is where the reference to
// it stands, which an alias puts elsewhere than the scalar.
func (r *reader) plainScalar(n *yaml.Node, line int, path string) any {
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
		r.errorf(line, path, "integer %s out of range (want a 64-bit integer)", n.Value)
		return nil
	case "!!float":
		var f float64
		if n.Decode(&f) == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
			return f
		}
		r.errorf(line, path, "got %s (want a finite number)", n.Value)
		return nil
	}
	return n.Value
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

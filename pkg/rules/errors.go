package rules

import (
	"strconv"
	"strings"
)

// Error is one problem found in a rule file. Parse and LoadDir return all
// problems they find joined with errors.Join; use errors.As to reach them.
type Error struct {
	// File is the file name as given to Parse (the path for LoadDir).
	File string
	// Line is the 1-based line of the offending node; 0 when unknown.
	Line int
	// Path is the YAML path of the offending node, such as
	// "descriptors[2].rate_limit.unit"; empty for file-level problems.
	Path string
	// Msg says what is wrong and, in parentheses, what was wanted.
	Msg string
}

// Error formats the problem as "file:line: path: problem (want …)".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

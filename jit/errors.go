package jit

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// ErrCompile is matched (errors.Is) by every *CompileError.
var ErrCompile = errors.New("kernel compilation failed")

// CompileError is a failed compilation, cached for the key.
type CompileError struct {
	Family  string
	Program string // program name in the log
	Key     Key
	Log     string // the compiler's whole log
	Line    int    // line of the first error in Program, 0 if none found
	Excerpt string // numbered source lines around Line
	Err     error  // the compiler's error
}

// maxLogLines bounds the log lines Error prints; Log keeps all.
const maxLogLines = 30

func (e *CompileError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "jit: compile %s (family %s, key %s): %v", e.Program, e.Family, e.Key.Short(), e.Err)
	if e.Log != "" {
		lines := strings.Split(e.Log, "\n")
		if len(lines) > maxLogLines {
			lines = append(lines[:maxLogLines], fmt.Sprintf("... %d more log lines", len(lines)-maxLogLines))
		}
		b.WriteString("\ncompiler log:\n")
		b.WriteString(strings.Join(lines, "\n"))
	}
	if e.Excerpt != "" {
		fmt.Fprintf(&b, "\nsource around line %d of %s:\n%s", e.Line, e.Program, e.Excerpt)
	}
	return b.String()
}

// Unwrap matches ErrCompile and the compiler's own error.
func (e *CompileError) Unwrap() []error { return []error{ErrCompile, e.Err} }

// newCompileError builds the cached error for a failed compile.
func newCompileError(src Source, key Key, log string, err error) *CompileError {
	e := &CompileError{Family: src.Family, Program: src.ProgramName(), Key: key, Log: log, Err: err}
	e.Line = firstErrorLine(log, e.Program)
	if e.Line > 0 {
		e.Excerpt = excerpt(src.Code, e.Line, 3)
	}
	return e
}

var errLineRE = regexp.MustCompile(`(?m)^(.*?)\((\d+)\): (?:catastrophic )?error`)

// firstErrorLine returns the line of the first error reported in program
// (not in an included header), or 0.
func firstErrorLine(log, program string) int {
	for _, m := range errLineRE.FindAllStringSubmatch(log, -1) {
		file := m[1]
		if file == program || strings.HasSuffix(file, "/"+program) {
			n, _ := strconv.Atoi(m[2])
			return n
		}
	}
	return 0
}

// excerpt returns lines line-ctx..line+ctx of code, numbered, with the
// given line marked.
func excerpt(code string, line, ctx int) string {
	lines := strings.Split(code, "\n")
	if line < 1 || line > len(lines) {
		return ""
	}
	lo, hi := max(1, line-ctx), min(len(lines), line+ctx)
	width := len(strconv.Itoa(hi))
	var b strings.Builder
	for i := lo; i <= hi; i++ {
		mark := "  "
		if i == line {
			mark = "> "
		}
		fmt.Fprintf(&b, "%s%*d | %s\n", mark, width, i, lines[i-1])
	}
	return strings.TrimRight(b.String(), "\n")
}

package main

import (
	"flag"
	"strings"
)

// pathList is a flag of several paths: repeated (--data a --data b) or given as
// the words that follow one of its values up to the next flag (--data a b), as
// parseFlags reads them.
type pathList []string

func (l *pathList) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(*l, " ")
}

func (l *pathList) Set(s string) error { *l = append(*l, s); return nil }

// isFlagWord reports whether the command-line word s is a flag (or the
// terminator --) rather than an argument, as package flag tells them apart.
func isFlagWord(s string) bool { return len(s) > 1 && s[0] == '-' }

// trailingList returns the pathList whose value is the last word of args, a
// prefix of a command line that fs.Parse read without error, or nil when the
// last word is something else (another flag's value, a bool flag).
func trailingList(fs *flag.FlagSet, args []string) *pathList {
	var last flag.Value
	for i := 0; i < len(args); i++ {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		f := fs.Lookup(name)
		if f == nil { // -h, --help: parsing stopped there
			return nil
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !hasValue && !(ok && b.IsBoolFlag()) {
			i++ // the next word is the value
		}
		last = f.Value
	}
	l, _ := last.(*pathList)
	return l
}

// parseInterspersed parses args into fs with flags and arguments in any order
// (flag.Parse stops at the first argument): the words that follow a pathList's
// value, up to the next flag, are more values of it; other arguments, and
// every word after --, are returned in order.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		read := args[:len(args)-len(rest)]
		if len(rest) == 0 || len(read) > 0 && read[len(read)-1] == "--" {
			return append(positional, rest...), nil
		}
		n := 1
		for n < len(rest) && !isFlagWord(rest[n]) {
			n++
		}
		if l := trailingList(fs, read); l != nil {
			for _, w := range rest[:n] {
				l.Set(w)
			}
		} else {
			positional = append(positional, rest[:n]...)
		}
		args = rest[n:]
	}
}

package demo

import (
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"unicode/utf8"
)

// Document is one text of the corpus.
type Document struct {
	Name string // path relative to the corpus root, slash-separated
	Text string
}

// CorpusOptions chooses the files of a corpus.
type CorpusOptions struct {
	// Root is the directory to read; empty means runtime.GOROOT()/src.
	Root string
	// MaxBytes caps the total size of the documents (required, > 0).
	MaxBytes int
	// MaxFileBytes skips files larger than this (0: 64 KiB).
	MaxFileBytes int
}

// GoCorpus collects Go source files (no tests, no testdata, no vendored code)
// under opts.Root in a deterministic order until opts.MaxBytes is reached.
//
// Files are ordered by the FNV-1a hash of their relative path (ties by path),
// which spreads the selection over the whole tree instead of taking the
// first packages alphabetically; the same tree always gives the same corpus.
// Files that are not valid UTF-8 are skipped.
func GoCorpus(opts CorpusOptions) ([]Document, error) {
	root := opts.Root
	if root == "" {
		root = filepath.Join(runtime.GOROOT(), "src")
	}
	if opts.MaxBytes <= 0 {
		return nil, fmt.Errorf("corpus: MaxBytes must be positive, got %d", opts.MaxBytes)
	}
	maxFile := opts.MaxFileBytes
	if maxFile <= 0 {
		maxFile = 64 << 10
	}
	type cand struct {
		rel  string
		hash uint64
	}
	var cands []cand
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") || !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Size() == 0 || info.Size() > int64(maxFile) {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		h := fnv.New64a()
		h.Write([]byte(rel))
		cands = append(cands, cand{rel, h.Sum64()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("corpus: walk %s: %w", root, err)
	}
	if len(cands) == 0 {
		return nil, fmt.Errorf("corpus: no Go files under %s", root)
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].hash != cands[j].hash {
			return cands[i].hash < cands[j].hash
		}
		return cands[i].rel < cands[j].rel
	})
	var docs []Document
	total := 0
	for _, c := range cands {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(c.rel)))
		if err != nil {
			return nil, fmt.Errorf("corpus: %w", err)
		}
		if !utf8.Valid(b) {
			continue
		}
		if total+len(b) > opts.MaxBytes {
			if total > 0 {
				continue // a smaller file may still fit
			}
			b = b[:opts.MaxBytes]
			for !utf8.Valid(b) {
				b = b[:len(b)-1]
			}
		}
		docs = append(docs, Document{Name: c.rel, Text: string(b)})
		total += len(b)
		if total >= opts.MaxBytes-256 {
			break
		}
	}
	return docs, nil
}

// TotalBytes returns the summed text length of docs.
func TotalBytes(docs []Document) int {
	n := 0
	for _, d := range docs {
		n += len(d.Text)
	}
	return n
}

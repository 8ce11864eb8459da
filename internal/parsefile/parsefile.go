// Package parsefile reads a file and parses its content, naming the file
// in a parse error.
package parsefile

import (
	"fmt"
	"os"
)

// Read returns parse of the content of the file at path. A parse error
// comes back as "path: error" (os.ReadFile's own errors name the path).
func Read[T any](path string, parse func([]byte) (T, error)) (T, error) {
	var zero T
	raw, err := os.ReadFile(path)
	if err != nil {
		return zero, err
	}
	v, err := parse(raw)
	if err != nil {
		return zero, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

//go:build !linux

package dist

import "errors"

// CEnv returns the value of name in the C library's environment; dflash
// reads it on Linux only.
func CEnv(name string) (value string, ok bool, err error) {
	return "", false, errors.New("dist: reading the C environment is implemented on Linux only")
}

//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package dirlock

import "os"

// Without flock(2) the lock only records its holder; it does not exclude.
func tryLock(f *os.File) (held bool, err error) { return false, nil }

func unlock(f *os.File) error { return nil }

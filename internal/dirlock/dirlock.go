// Package dirlock lets one process at a time write an output directory.
//
// The lock is flock(2) on a file beside the directory (".NAME.lock" in its parent,
// so that a directory replaced by rename stays covered). The kernel releases it when
// the holding process exits, however it exits, so a lock left by a dead process is
// simply taken over; the file itself is never removed (removing it would let two
// processes lock two different files). The holder writes its pid, host, start time
// and command into the file, for the message that refuses a second writer.
package dirlock

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

// Holder describes the process that holds a lock.
type Holder struct {
	PID     int       `json:"pid"`
	Host    string    `json:"host"`
	Start   time.Time `json:"start"`
	Command string    `json:"command"`
}

func (h Holder) String() string {
	return fmt.Sprintf("%s (pid %d on %s, started %s)", h.Command, h.PID, h.Host, h.Start.Format(time.RFC3339))
}

// HeldError is Acquire's error when another process holds the lock.
type HeldError struct {
	Dir    string
	Holder *Holder // nil when the holder has not written its details yet
}

func (e *HeldError) Error() string {
	who := "another process"
	if e.Holder != nil {
		who = e.Holder.String()
	}
	return fmt.Sprintf("%s is in use by %s: one writer per output directory (wait for it, stop it, or choose another output)", e.Dir, who)
}

// Lock is a held lock.
type Lock struct {
	f *os.File
}

// Path returns the lock file of dir.
func Path(dir string) string {
	dir = filepath.Clean(dir)
	return filepath.Join(filepath.Dir(dir), "."+filepath.Base(dir)+".lock")
}

// Acquire takes the lock of dir for this process, or returns a *HeldError naming the
// process that holds it; it never waits. command names this process in the file.
func Acquire(dir, command string) (*Lock, error) {
	path := Path(dir)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	held, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	prev := readHolder(path)
	if held {
		f.Close()
		return nil, &HeldError{Dir: dir, Holder: prev}
	}
	if prev != nil {
		slog.Warn("taking over the lock of a process that ended without releasing it", "dir", dir, "previous", prev.String())
	}
	host, _ := os.Hostname()
	b, _ := json.Marshal(Holder{PID: os.Getpid(), Host: host, Start: time.Now().UTC().Truncate(time.Second), Command: command})
	if err := writeHolder(f, append(b, '\n')); err != nil {
		unlock(f)
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// Release empties the lock file and releases the lock. It is safe on a nil Lock.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Truncate(0)
	err = errors.Join(err, unlock(l.f), l.f.Close())
	l.f = nil
	return err
}

func writeHolder(f *os.File, b []byte) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.WriteAt(b, 0)
	return err
}

// readHolder reads the holder recorded in the lock file (nil when there is none).
func readHolder(path string) *Holder {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return nil
	}
	var h Holder
	if json.Unmarshal(b, &h) != nil {
		return nil
	}
	return &h
}

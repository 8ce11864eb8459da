package jit

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"
)

// Compiler turns a Source into a loadable image (CUBIN or PTX).
type Compiler interface {
	// Version identifies the compiler and its version, e.g. "nvrtc 13.0";
	// it is part of every key.
	Version() string
	// Compile compiles src for src.Arch with src.Options. It returns the
	// compiler's log also when it fails. It must be safe for concurrent use.
	Compile(ctx context.Context, src Source) (image []byte, log string, err error)
}

// Config configures a Cache.
type Config struct {
	Compiler Compiler // required
	// Dir is the disk tier's directory; "" keeps the cache in memory only.
	// Use DefaultDir for the usual location.
	Dir string
	// Budget is the number of distinct keys one family may have in the
	// process before the cache warns; 0 means DefaultBudget.
	Budget int
	// Logger receives warnings (budget, discarded files); nil means slog.Default().
	Logger *slog.Logger
	// OnBudget, if set, is called (once per family) when a family exceeds
	// the budget, in addition to the log warning.
	OnBudget func(BudgetWarning)
}

// DefaultBudget is the specialisation budget per kernel family.
const DefaultBudget = 8

// Cache is the kernel cache. It is safe for concurrent use; one per process
// is the intent (the program that makes it hands it to every worker),
// several are fine (tests).
type Cache struct {
	cfg      Config
	compiler string // Compiler.Version(), fixed at New

	mu    sync.RWMutex
	byKey map[Key]*entry
	bySrc map[srcKey]*entry

	budget      budget
	stats       counters
	warnedWrite sync.Once
}

// entry is one key in the memory tier; done is closed when img or err is set.
type entry struct {
	key  Key
	done chan struct{}
	img  *Image
	err  error
}

// New returns a cache with the given configuration.
func New(cfg Config) (*Cache, error) {
	if cfg.Compiler == nil {
		return nil, errors.New("jit: Config.Compiler is nil")
	}
	if cfg.Budget <= 0 {
		cfg.Budget = DefaultBudget
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Cache{cfg: cfg, compiler: cfg.Compiler.Version(), byKey: map[Key]*entry{}, bySrc: map[srcKey]*entry{}}
	c.budget.init(cfg.Budget)
	if cfg.Dir != "" {
		removed, err := removeStaleTemps(cfg.Dir, time.Now())
		if len(removed) > 0 {
			cfg.Logger.Info("jit: removed temporary kernel cache files left by killed writers",
				"dir", cfg.Dir, "files", len(removed))
		}
		if err != nil {
			cfg.Logger.Warn("jit: cannot remove stale temporary kernel cache files", "dir", cfg.Dir, "err", err)
		}
	}
	return c, nil
}

// Dir returns the disk tier's directory ("" when memory only).
func (c *Cache) Dir() string { return c.cfg.Dir }

// CompilerVersion returns the compiler version that is part of every key.
func (c *Cache) CompilerVersion() string { return c.compiler }

// Key returns the key of src in this cache.
func (c *Cache) Key(src Source) Key { return KeyOf(src, c.compiler) }

// Get returns the compiled image of src: from memory, else from disk, else
// by compiling it, at most once per key per process however many goroutines
// ask at once. A failed compile returns a *CompileError, the same one on
// every later Get of the key. ctx bounds only the wait: a compile that has
// started runs to completion for the other callers and for the cache.
func (c *Cache) Get(ctx context.Context, src Source) (*Image, error) {
	e, leader, err := c.entry(ctx, src)
	if err != nil {
		return nil, err
	}
	return c.wait(ctx, e, leader)
}

// entry finds or creates the memory-tier entry of src; the creator (leader)
// starts resolving it.
func (c *Cache) entry(ctx context.Context, src Source) (e *entry, leader bool, err error) {
	if src.Arch == "" {
		return nil, false, fmt.Errorf("jit: Source.Arch is empty (family %q)", src.Family)
	}
	sk := makeSrcKey(src)
	c.mu.RLock()
	e = c.bySrc[sk]
	c.mu.RUnlock()
	if e != nil {
		return e, false, nil
	}
	key := c.Key(src)
	c.mu.Lock()
	e = c.byKey[key]
	leader = e == nil
	if leader {
		e = &entry{key: key, done: make(chan struct{})}
		c.byKey[key] = e
	}
	c.bySrc[sk] = e
	c.mu.Unlock()
	if leader {
		go c.resolve(context.WithoutCancel(ctx), e, src)
	}
	return e, leader, nil
}

func (c *Cache) wait(ctx context.Context, e *entry, leader bool) (*Image, error) {
	select {
	case <-e.done:
	default:
		if !leader {
			c.stats.waits.Add(1)
		}
		select {
		case <-e.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if !leader {
		if e.err != nil {
			c.stats.errorHits.Add(1)
		} else {
			c.stats.memoryHits.Add(1)
		}
	}
	return e.img, e.err
}

// resolve fills e from disk or by compiling; it runs once per key.
func (c *Cache) resolve(ctx context.Context, e *entry, src Source) {
	defer close(e.done)
	c.budget.note(c, e.key, src)
	if c.cfg.Dir != "" && c.fromDisk(e, src) {
		return
	}
	t0 := time.Now()
	image, log, err := c.cfg.Compiler.Compile(ctx, src)
	dt := time.Since(t0)
	c.stats.compiles.Add(1)
	c.stats.compileNS.Add(int64(dt))
	if err == nil && len(image) == 0 {
		err = errors.New("compiler returned an empty image")
	}
	if err != nil {
		c.stats.compileErrors.Add(1)
		e.err = newCompileError(src, e.key, log, err)
		return
	}
	e.img = newImage(c, e.key, src, image, log, dt, false)
	if c.cfg.Dir == "" {
		return
	}
	meta := Meta{Family: src.Family, Program: src.ProgramName(), Arch: src.Arch, Compiler: c.compiler,
		Options: src.Options, Params: src.Params, Created: time.Now().UTC(),
		CompileMS: float64(dt.Microseconds()) / 1000, Log: log}
	if err := writeFile(c.cfg.Dir, e.key, meta, image); err != nil {
		c.stats.diskWriteErrors.Add(1)
		c.warnedWrite.Do(func() {
			c.cfg.Logger.Warn("jit: cannot write the kernel cache; kernels stay in memory only", "dir", c.cfg.Dir, "err", err)
		})
		return
	}
	c.stats.diskWrites.Add(1)
}

// fromDisk fills e from its disk file and reports whether it did. A file
// that is not trusted (corrupt, for another key, metadata that disagrees
// with src, not a regular file) is logged and removed, so the caller
// compiles and writes a good one.
func (c *Cache) fromDisk(e *entry, src Source) bool {
	t0 := time.Now()
	meta, image, err := readFile(c.cfg.Dir, e.key)
	if err == nil {
		err = c.checkMeta(e.key, meta, src)
	}
	var ce *corruptError
	switch {
	case err == nil:
		c.stats.diskHits.Add(1)
		c.stats.diskLoadNS.Add(int64(time.Since(t0)))
		e.img = newImage(c, e.key, src, image, meta.Log, 0, true)
		return true
	case errors.Is(err, fs.ErrNotExist):
	case errors.As(err, &ce):
		c.stats.diskDiscarded.Add(1)
		c.cfg.Logger.Warn("jit: discarding kernel cache file and rebuilding it", "reason", ce.reason, "file", ce.path)
		if rerr := os.Remove(ce.path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			c.cfg.Logger.Warn("jit: cannot remove bad kernel cache file", "file", ce.path, "err", rerr)
		}
	default:
		c.stats.diskReadErrors.Add(1)
		c.cfg.Logger.Warn("jit: cannot read kernel cache file; compiling", "err", err)
	}
	return false
}

// checkMeta compares the key parts a disk file records (arch, compiler,
// options) with src's, so a hit rests on more than the file's key alone.
func (c *Cache) checkMeta(key Key, meta Meta, src Source) error {
	if meta.Arch == src.Arch && meta.Compiler == c.compiler && slices.Equal(meta.Options, src.Options) {
		return nil
	}
	return &corruptError{path: filePath(c.cfg.Dir, key),
		reason: fmt.Sprintf("records arch %q, compiler %q, options %q; expected %q, %q, %q",
			meta.Arch, meta.Compiler, meta.Options, src.Arch, c.compiler, src.Options)}
}

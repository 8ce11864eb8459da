package jit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"dflash/cuda"
)

// Loader is a device context that loads images: *gpu.Device implements it.
// Its methods are called on the thread that owns the context.
type Loader interface {
	// LoaderID is distinct for every device context ever opened in the
	// process (a reopened GPU gets a new one).
	LoaderID() string
	LoadModule(image []byte) (cuda.Module, error)
	ModuleFunction(m cuda.Module, name string) (cuda.Function, error)
	UnloadModule(m cuda.Module) error
}

// Image is a compiled kernel program (CUBIN or PTX) held by the cache.
type Image struct {
	Key         Key
	Family      string
	Program     string
	Arch        string
	Data        []byte        // the image; do not modify
	Log         string        // compiler log (warnings)
	CompileTime time.Duration // 0 when the image came from disk
	FromDisk    bool

	c    *Cache
	mu   sync.Mutex
	mods map[string]*loaded // by LoaderID
}

// loaded is an image's module in one device context.
type loaded struct {
	once  sync.Once
	mod   cuda.Module
	err   error
	mu    sync.Mutex                               // serialises additions to funcs
	funcs atomic.Pointer[map[string]cuda.Function] // copy on write: lookups take no lock
}

func newImage(c *Cache, key Key, src Source, data []byte, log string, dt time.Duration, fromDisk bool) *Image {
	return &Image{Key: key, Family: src.Family, Program: src.ProgramName(), Arch: src.Arch, Data: data, Log: log,
		CompileTime: dt, FromDisk: fromDisk, c: c, mods: map[string]*loaded{}}
}

func (img *Image) loadedIn(l Loader) *loaded {
	id := l.LoaderID()
	img.mu.Lock()
	m := img.mods[id]
	if m == nil {
		m = &loaded{}
		m.funcs.Store(&map[string]cuda.Function{})
		img.mods[id] = m
	}
	img.mu.Unlock()
	m.once.Do(func() {
		t0 := time.Now()
		m.mod, m.err = l.LoadModule(img.Data)
		img.c.stats.moduleLoads.Add(1)
		img.c.stats.moduleLoadNS.Add(int64(time.Since(t0)))
		if m.err != nil {
			m.err = fmt.Errorf("jit: load %s (key %s) on %s: %w", img.Program, img.Key.Short(), id, m.err)
		}
	})
	return m
}

// Module returns the image's module in l, loading it on first use per loader.
func (img *Image) Module(l Loader) (cuda.Module, error) {
	m := img.loadedIn(l)
	return m.mod, m.err
}

// Function returns kernel name of the image in l, loading the module on
// first use per loader and looking each name up once.
func (img *Image) Function(l Loader, name string) (cuda.Function, error) {
	m := img.loadedIn(l)
	if m.err != nil {
		return 0, m.err
	}
	if f, ok := (*m.funcs.Load())[name]; ok {
		img.c.stats.functionHits.Add(1)
		return f, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old := *m.funcs.Load()
	if f, ok := old[name]; ok {
		img.c.stats.functionHits.Add(1)
		return f, nil
	}
	f, err := l.ModuleFunction(m.mod, name)
	if err != nil {
		return 0, fmt.Errorf("jit: %s (key %s): %w", img.Program, img.Key.Short(), err)
	}
	funcs := make(map[string]cuda.Function, len(old)+1)
	for k, v := range old {
		funcs[k] = v
	}
	funcs[name] = f
	m.funcs.Store(&funcs)
	return f, nil
}

// Unload unloads the image's module from l, if loaded; a later Function
// loads it again.
func (img *Image) Unload(l Loader) error {
	img.mu.Lock()
	m := img.mods[l.LoaderID()]
	delete(img.mods, l.LoaderID())
	img.mu.Unlock()
	if m == nil || m.err != nil || m.mod == 0 {
		return nil
	}
	return l.UnloadModule(m.mod)
}

// Forget drops every module handle the cache holds for loaderID (after its
// device context is gone) without calling the driver.
func (c *Cache) Forget(loaderID string) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, e := range c.byKey {
		select {
		case <-e.done:
		default:
			continue
		}
		if e.img != nil {
			e.img.mu.Lock()
			delete(e.img.mods, loaderID)
			e.img.mu.Unlock()
		}
	}
}

// Kernel is a handle on one Source for launch sites that run often: it
// remembers the source's cache entry, so a hit costs a pointer load rather
// than hashing the source. Make one per generated kernel with Cache.Kernel
// and keep it.
type Kernel struct {
	c   *Cache
	src Source
	e   atomic.Pointer[entry]
}

// Kernel returns a handle on src; nothing is compiled until first use.
func (c *Cache) Kernel(src Source) *Kernel { return &Kernel{c: c, src: src} }

// Source returns the handle's source.
func (k *Kernel) Source() Source { return k.src }

// Image returns the compiled image, as Cache.Get does.
func (k *Kernel) Image(ctx context.Context) (*Image, error) {
	if e := k.e.Load(); e != nil {
		select {
		case <-e.done:
			if e.err != nil {
				k.c.stats.errorHits.Add(1)
			} else {
				k.c.stats.memoryHits.Add(1)
			}
			return e.img, e.err
		default:
		}
	}
	e, leader, err := k.c.entry(ctx, k.src)
	if err != nil {
		return nil, err
	}
	k.e.Store(e)
	return k.c.wait(ctx, e, leader)
}

// Function returns kernel name loaded in l, compiling and loading on first use.
func (k *Kernel) Function(ctx context.Context, l Loader, name string) (cuda.Function, error) {
	img, err := k.Image(ctx)
	if err != nil {
		return 0, err
	}
	return img.Function(l, name)
}

// Package jit is dflash's process-wide kernel cache (contract 2 of the
// design): CUDA C++ generated at run time is compiled once per key, kept in
// three tiers and never silently replaced.
//
//	nv, err := jit.NewNVRTC()
//	dir, _, err := jit.DefaultDir()
//	cache, err := jit.New(jit.Config{Compiler: nv, Dir: dir})
//	img, err := cache.Get(ctx, jit.Source{
//		Family: "flex_fwd", Code: src, Arch: dev.Arch(),
//		Options: []string{"-DFLEX_D=128"}, Params: map[string]string{"head_dim": "128"},
//	})
//	fn, err := img.Function(dev, "flex_fwd")     // on dev's worker thread
//
// A launch site that runs every step keeps a handle instead, so a hit costs
// a pointer load rather than hashing the source (about 100 ns against 500 ns
// for a 3 KB source on a slow CPU):
//
//	k := cache.Kernel(src)                       // once
//	fn, err := k.Function(ctx, dev, "flex_fwd")  // every launch
//
// # Key
//
// The key is SHA-256 over (source code, compile options in order, target
// arch, compiler version, cache-format version); see KeyOf. Family, Name
// and Params describe a kernel (budget warnings, dflash cache ls) but are
// not part of the key.
//
// # Tiers
//
//  1. Memory: compiled images of this process, indexed by the key's inputs
//     (compared whole on every hit). Get compiles a key at most once per
//     process however many goroutines ask at once (singleflight);
//     the others wait for that result. A failed compile is cached too: every
//     later Get of the key returns the same *CompileError (NVRTC log and the
//     numbered source lines around the first error) without recompiling.
//  2. Disk: one file per key in the cache directory, written to a temporary
//     file, fsynced and renamed into place, so a reader in another process
//     sees a whole file or none. Each file has a header (magic, format
//     version, key, lengths) and a SHA-256 checksum; a file that is corrupt,
//     truncated, from another format version, for another key, with lengths
//     that disagree with its size or with recorded arch, compiler or options
//     that differ from the source's is logged, deleted and rebuilt, never
//     trusted. A file is read no further than its header allows, and a
//     header that gives more than the file's size or more than a cache
//     file may hold (16 MiB of metadata, 256 MiB of image) is refused
//     unread, so a huge or growing file costs no more than a good one.
//     Anything but a regular file at a key's path (a FIFO, a directory, a
//     symbolic link) is found with Lstat before any open, and the open
//     neither follows a link swapped in since (O_NOFOLLOW) nor blocks; it
//     is removed when it can be, else the kernel stays in memory. The
//     metadata keeps every byte of the options and names (no JSON). New
//     removes the temporary files that killed writers left in the
//     directory (those older than ten minutes).
//  3. Loaded modules and function handles per device context (a Loader,
//     implemented by *gpu.Device): Image.Function loads the module once per
//     loader and remembers each function.
//
// The directory is, in order: Config.Dir; $DFLASH_KERNEL_CACHE ("off"
// keeps the cache in memory only); $XDG_CACHE_HOME/dflash/kernels;
// ~/.cache/dflash/kernels. The dflash CLI's --cache-dir flag sets
// Config.Dir.
//
// # Specialisation budget
//
// Kernels are specialised on structure, never on size (contract 3), so a
// family needs few distinct kernels. When one family exceeds Config.Budget
// distinct keys in a process, the cache warns once, naming the key parts
// that differ (params, options, arch, code) so the size that leaked into
// the source can be found.
//
// # Compilers
//
// The compiler sits behind the Compiler interface: NVRTC on GPUs (NewNVRTC),
// fakes in tests, so the cache's concurrency is tested on CPUs alone.
package jit

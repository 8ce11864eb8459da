// Package cuda binds the parts of the CUDA driver API, NVRTC, cuBLASLt and
// NCCL that dflash needs, through dlopen (github.com/ebitengine/purego), so
// the module builds with CGO_ENABLED=0 on machines that have no CUDA at all.
//
// # Libraries
//
// Each library is found on first use, in this order:
//
//  1. an environment variable naming the file: DFLASH_LIBCUDA (driver,
//     libcuda.so.1), DFLASH_LIBNVRTC (libnvrtc.so.13/12), DFLASH_LIBCUBLASLT
//     (libcublasLt.so.13/12), DFLASH_LIBNCCL (libnccl.so.2). When the variable
//     is set and the file cannot be opened, that is the error: there is no
//     silent fall-back to another copy;
//  2. the dynamic loader's own path (LD_LIBRARY_PATH, ld.so.cache);
//  3. known CUDA folders ($CUDA_HOME, $CUDA_PATH, /usr/local/cuda*,
//     /usr/lib/x86_64-linux-gnu, /usr/local/nvidia/lib64, ...);
//  4. Python wheels: site-packages/nvidia/*/lib under the usual prefixes,
//     $VIRTUAL_ENV and $CONDA_PREFIX.
//
// When nothing is found the error ([*LibraryError], errors.Is
// [ErrLibraryNotFound]) lists every place searched and why each failed.
// [Probe] reports the outcome for all four libraries (dflash doctor prints it).
//
// The C library (libc.so.6, for [CEnv]) is opened by the same loader, with
// no override variable.
//
// # NCCL environment
//
// NVLink multicast stays off in every process that loads NCCL: before
// opening the library, the loader runs [GuardMulticast], which sets
//
//	NCCL_NVLS_ENABLE=0                   NCCL's NVLink SHARP (NVLS) algorithms
//	TORCH_SYMM_MEM_DISABLE_MULTICAST=1   PyTorch symmetric memory (child processes)
//	NVSHMEM_DISABLE_NVLS=1               NVSHMEM's NVLS collectives
//
// where they are unset or empty, keeps them where they already hold exactly
// these values, and refuses (an error naming each variable, its value and
// the value it must have) where a user set one to anything else, or named
// the NVLS algorithms in NCCL_ALGO. A program that creates NVLink multicast
// objects can put a shared host's GPUs out of service for a day or more, so
// the guard is strict: a value it does not know to be safe is refused
// rather than interpreted. Variables are set with os.Setenv, which also
// updates the C library's environment that NCCL reads with getenv; [CEnv]
// reads that environment back so that [CheckCEnv] can prove it. A program
// that uses NCCL calls GuardMulticast itself first, to report a refusal
// before any other work.
//
// # Errors
//
// Every binding returns an error naming the C call and, for the driver,
// CUDA's error name and string (cuGetErrorName, cuGetErrorString), e.g.
//
//	cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (out of memory)
//
// NVRTC, cuBLASLt and NCCL errors carry their library's status name and
// text the same way. All are *[Error]; compare with errors.Is against the
// sentinels ([ErrOutOfMemory], [ErrInvalidContext], ...).
//
// # Threads
//
// The driver keeps the current context per OS thread. Callers must bind a
// context on the thread they call from (package gpu does this: one locked
// worker thread per GPU). [SetThreadCheck] installs a hook run before every
// context-bound call; package gpu uses it in debug mode to catch CUDA calls
// from threads other than its workers.
//
// Calls that take host pointers keep the Go memory alive for the duration of
// the call only; asynchronous copies need memory that outlives the stream's
// use of it (pinned memory from [MemAllocHost]).
package cuda

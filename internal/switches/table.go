package switches

// The switches, each declared once. Numeric marks those that change
// numerical results (kernel choice, algorithm choice): Identity records them
// in a training run's identity when they are not at their default. A new
// switch goes here, and docs/SWITCHES.md is regenerated
// (go test ./cmd/dflash -run TestSwitchesDoc -update).

// Numerics.
var (
	NoASM = declare(&Bool{Info: Info{Name: "DFLASH_NOASM", Numeric: true,
		Doc: "on: the CPU kernels of flex and tensor are the portable Go ones instead of the AVX2/FMA assembly (read at start)"}})
	FlexFwd = declare(&Enum{Info: Info{Name: "DFLASH_FLEX_FWD", Numeric: true,
		Doc: "the GPU flex-attention forward kernel where the caller leaves it open: auto is Hopper on sm_90 (or an unknown GPU), else portable"},
		Values: []string{"auto", "hopper", "portable"}, Default: "auto"})
	FlexBwd = declare(&Enum{Info: Info{Name: "DFLASH_FLEX_BWD", Numeric: true,
		Doc: "the GPU flex-attention backward kernel, as DFLASH_FLEX_FWD (a deterministic run keeps the portable one)"},
		Values: []string{"auto", "hopper", "portable"}, Default: "auto"})
	GemmTune = declare(&Bool{Info: Info{Name: "DFLASH_GEMM_TUNE", Numeric: true,
		Doc: "time each GEMM shape's cuBLASLt candidates at first use and keep the fastest (saved in gemm-algos.json); off: the heuristic's first"},
		Default: true})
	GemmWorkspaceMiB = declare(&Int{Info: Info{Name: "DFLASH_GEMM_WORKSPACE_MIB", Numeric: true,
		Doc: "the cuBLASLt workspace in MiB, which bounds the algorithms a GEMM may use"},
		Default: 32, Min: 1, Max: 4096})
	FP8FastAccum = declare(&Bool{Info: Info{Name: "DFLASH_FP8_FAST_ACCUM", Numeric: true,
		Doc: "the FP8 target's products (--target-dtype fp8) in cuBLASLt's fast accumulation, their partial sums not promoted to fp32 along K: 12 ms of the 8B step faster, taps' errors unchanged to 3 digits (docs/PERF.md 2026-12-04); off: promoted"},
		Default: true})
)

// Execution, memory and checks: the same numbers either way.
var (
	CUDAGraphs = declare(&Bool{Info: Info{Name: "DFLASH_CUDA_GRAPHS",
		Doc: "replay each fixed-shape region of a training step as a CUDA graph; off: launch everything plainly (to measure what graphs save)"},
		Default: true})
	StepVMM = declare(&Bool{Info: Info{Name: "DFLASH_STEP_VMM",
		Doc:        "a training step's GPU memory: on, one range of addresses grown in place (an error where the GPU cannot); off, chunks from the device allocator",
		DefaultDoc: "auto: the range where the GPU has virtual memory management, else chunks"}})
	FlexCheck = declare(&Bool{Info: Info{Name: "DFLASH_FLEX_CHECK",
		Doc: "checked mode of flex attention on the CPU and the GPU: a tensor read outside its shape is an error instead of clamped (slow)"}})
	GPUDebug = declare(&Bool{Info: Info{Name: "DFLASH_GPU_DEBUG",
		Doc: "check that every CUDA call runs on the thread of its GPU's worker (read at start)"}})
)

// Where things are.
var (
	LibCUDA = declare(&String{Info: Info{Name: "DFLASH_LIBCUDA",
		Doc: "the CUDA driver library to load (libcuda.so.1)", DefaultDoc: libSearch}, What: "path"})
	LibNVRTC = declare(&String{Info: Info{Name: "DFLASH_LIBNVRTC",
		Doc: "the NVRTC library to load (libnvrtc.so.13 or .12)", DefaultDoc: libSearch}, What: "path"})
	LibCublasLt = declare(&String{Info: Info{Name: "DFLASH_LIBCUBLASLT",
		Doc: "the cuBLASLt library to load (libcublasLt.so.13 or .12)", DefaultDoc: libSearch}, What: "path"})
	LibNCCL = declare(&String{Info: Info{Name: "DFLASH_LIBNCCL",
		Doc: "the NCCL library to load (libnccl.so.2)", DefaultDoc: libSearch}, What: "path"})
	KernelCache = declare(&String{Info: Info{Name: "DFLASH_KERNEL_CACHE",
		Doc:        "the on-disk kernel cache directory; off: compiled kernels are kept in memory only",
		DefaultDoc: "$XDG_CACHE_HOME/dflash/kernels, else ~/.cache/dflash/kernels"}, What: "path"})
	Log = declare(&Enum{Info: Info{Name: "DFLASH_LOG",
		Doc: "the level of the log on stderr"},
		Values: []string{"debug", "info", "warn", "error"}, Default: "info"})
	JobToken = declare(&String{Info: Info{Name: "DFLASH_JOB_TOKEN", Secret: true,
		Doc: "dflash nccl check: the default of --token, the job token that every rank of a multi-process check shares", DefaultDoc: "none"},
		What: "text"})
)

// Tests and GPU checks.
var (
	Seed = declare(&Uint{Info: Info{Name: "DFLASH_SEED",
		Doc: "tests: the random seed, to replay a failure (each test logs the seed it used)", DefaultDoc: "the clock"}})
	Results = declare(&String{Info: Info{Name: "DFLASH_RESULTS",
		Doc: "GPU check binaries: a file to which each check's result is appended as a JSON line (scripts/gpu-check.sh)", DefaultDoc: "none"},
		What: "path"})
)

const libSearch = "searched: loader path, CUDA folders, Python wheels"

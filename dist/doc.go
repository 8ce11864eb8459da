// Package dist holds what several dflash processes need to form one NCCL
// communicator (contract 9 of the design): the rendezvous that hands rank
// 0's NCCL unique id to every other rank over TCP, and the environment guard
// that keeps NVLink multicast off in every process that loads NCCL.
//
// # Environment guard
//
// GuardMulticast must be the first thing a dflash process that uses NCCL
// does, before any NCCL call. It sets
//
//	NCCL_NVLS_ENABLE=0                   NCCL's NVLink SHARP (NVLS) algorithms
//	TORCH_SYMM_MEM_DISABLE_MULTICAST=1   PyTorch symmetric memory (child processes)
//	NVSHMEM_DISABLE_NVLS=1               NVSHMEM's NVLS collectives
//
// where they are unset or empty, keeps them where they already hold exactly
// these values, and refuses to run (an error naming each variable, its value
// and the value it must have) where a user set one to anything else, or
// named the NVLS algorithms in NCCL_ALGO. A program that creates NVLink
// multicast objects can put a shared host's GPUs out of service for a day
// or more, so the guard is strict: a value it does not know to be safe is
// refused rather than interpreted. Variables are set with os.Setenv, which
// also updates the C library's environment that NCCL reads with getenv;
// CEnv reads that environment back so the check can prove it.
//
// # Rendezvous
//
// Rank 0 listens on the coordinator address (host:port); every other rank
// connects, retrying until its timeout, and sends a hello: protocol name,
// version, nranks, its rank and the job token. Rank 0 answers each hello
// with a rejection that says why, or, once every rank has joined, with the
// unique id; each rank acknowledges it, and rank 0 returns when all have.
//
// Messages are frames of a 4-byte big-endian length and a JSON object
// (at most MaxFrame bytes). Rank 0 treats a hello from another job (wrong
// token) or a peer that is not dflash as a stray: it rejects or drops that
// connection and keeps waiting. A hello from this job that disagrees on
// nranks or the protocol version, or names a rank already joined, is fatal
// for both sides. A rank whose connection drops before the id is handed out
// may connect again (a client retries on a dropped connection); after the
// id is handed out, a missing acknowledgement is an error on rank 0.
//
// Every error is a *Error naming the address, the rank and nranks; match
// the cause with errors.Is against ErrTimeout, ErrMismatch, ErrRejected,
// ErrDuplicateRank or ErrDropped.
package dist

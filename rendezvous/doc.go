// Package rendezvous lets several dflash processes form one NCCL
// communicator (contract 9 of the design): rank 0 makes NCCL's unique id
// and hands it to every other rank over TCP. (The environment guard that
// keeps NVLink multicast off lives with the NCCL binding, in package cuda.)
// ParseLaunch finds a process's rank, world size, GPU and the coordinator
// address from --rank, --world-size, --rendezvous and the torchrun
// environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT).
//
// # Protocol
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
package rendezvous

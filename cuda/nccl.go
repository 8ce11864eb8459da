package cuda

import (
	"fmt"
	"unsafe"
)

// NCCL handles and enums.
type (
	Comm         uintptr // ncclComm_t
	NCCLDataType int32   // ncclDataType_t
	NCCLRedOp    int32   // ncclRedOp_t
)

// UniqueID is an ncclUniqueId: rank 0 makes it and hands it to every rank.
type UniqueID [128]byte

// NCCL data types.
const (
	NCCLInt8     NCCLDataType = 0
	NCCLUint8    NCCLDataType = 1
	NCCLInt32    NCCLDataType = 2
	NCCLUint32   NCCLDataType = 3
	NCCLInt64    NCCLDataType = 4
	NCCLUint64   NCCLDataType = 5
	NCCLFloat16  NCCLDataType = 6
	NCCLFloat32  NCCLDataType = 7
	NCCLFloat64  NCCLDataType = 8
	NCCLBfloat16 NCCLDataType = 9
)

// NCCL reduction operations.
const (
	NCCLSum  NCCLRedOp = 0
	NCCLProd NCCLRedOp = 1
	NCCLMax  NCCLRedOp = 2
	NCCLMin  NCCLRedOp = 3
	NCCLAvg  NCCLRedOp = 4
)

// ncclInProgress is the ncclResult_t of an operation still running.
const ncclInProgress = 7

var ncclResultNames = map[int32]string{
	1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError", 4: "ncclInvalidArgument",
	5: "ncclInvalidUsage", 6: "ncclRemoteError", 7: "ncclInProgress",
}

// nccl calls an NCCL function and converts its ncclResult_t; comm, when not
// zero, is asked for its last error message.
//
//go:uintptrescapes
func nccl(p *proc, comm Comm, args ...uintptr) error {
	code, err := p.status(args...)
	if code == 0 {
		return err
	}
	e := &Error{Call: p.name, Lib: "nccl", Code: int(code), Name: ncclResultNames[code]}
	if e.Name == "" {
		e.Name = fmt.Sprintf("ncclResult %d", code)
	}
	if s, err := pNcclGetErrorString.invoke(uintptr(code)); err == nil && s != 0 {
		e.Desc = cString(s)
	}
	if s, err := pNcclGetLastError.invoke(uintptr(comm)); err == nil && s != 0 {
		if last := cString(s); last != "" {
			e.Desc += ": " + last
		}
	}
	return e
}

// NCCLVersion returns NCCL's version as 10000*major + 100*minor + patch.
func NCCLVersion() (int, error) {
	var v int32
	err := nccl(pNcclGetVersion, 0, uintptr(unsafe.Pointer(&v)))
	return int(v), err
}

// NCCLGetUniqueID creates the id that all ranks of a new communicator share.
func NCCLGetUniqueID() (UniqueID, error) {
	id := new(UniqueID)
	err := nccl(pNcclGetUniqueID, 0, uintptr(unsafe.Pointer(id)))
	return *id, err
}

// NCCLCommInitRank joins rank of an nranks communicator on the current
// device; it blocks until all ranks have joined.
func NCCLCommInitRank(nranks int, id UniqueID, rank int) (Comm, error) {
	// ncclCommInitRank takes the 128-byte id by value. The x86-64 System V ABI
	// passes such a struct in memory: the integer arguments (comm*, nranks,
	// rank) go in the first three registers and the struct's 16 eightbytes on
	// the stack, which is where SyscallN puts arguments 7 and later.
	if nranks <= 0 || rank < 0 || rank >= nranks {
		return 0, fmt.Errorf("ncclCommInitRank: rank %d of %d ranks", rank, nranks)
	}
	var c uintptr
	w := (*[16]uint64)(unsafe.Pointer(&id))
	err := nccl(pNcclCommInitRank, 0, uintptr(unsafe.Pointer(&c)), uintptr(nranks), uintptr(rank), 0, 0, 0,
		uintptr(w[0]), uintptr(w[1]), uintptr(w[2]), uintptr(w[3]), uintptr(w[4]), uintptr(w[5]), uintptr(w[6]), uintptr(w[7]),
		uintptr(w[8]), uintptr(w[9]), uintptr(w[10]), uintptr(w[11]), uintptr(w[12]), uintptr(w[13]), uintptr(w[14]), uintptr(w[15]))
	return Comm(c), err
}

// NCCLCommInitAll creates one communicator per listed device, all in this
// process, from the calling thread.
func NCCLCommInitAll(devices []int) ([]Comm, error) {
	if len(devices) == 0 {
		return nil, fmt.Errorf("ncclCommInitAll: no devices")
	}
	comms := make([]uintptr, len(devices))
	devs := make([]int32, len(devices))
	for i, d := range devices {
		devs[i] = int32(d)
	}
	if err := nccl(pNcclCommInitAll, 0, uintptr(unsafe.Pointer(&comms[0])), uintptr(len(devices)),
		uintptr(unsafe.Pointer(&devs[0]))); err != nil {
		return nil, err
	}
	out := make([]Comm, len(comms))
	for i, c := range comms {
		out[i] = Comm(c)
	}
	return out, nil
}

// Destroy frees c.
func (c Comm) Destroy() error { return nccl(pNcclCommDestroy, c, uintptr(c)) }

// Abort frees c without waiting for its pending operations: the way out of
// a collective that never completes (a lost rank), which it makes fail.
func (c Comm) Abort() error { return nccl(pNcclCommAbort, c, uintptr(c)) }

// AsyncError returns the error an operation of c met in the background
// (a network failure, a rank that left), or nil.
func (c Comm) AsyncError() error {
	var code int32
	if err := nccl(pNcclCommAsyncError, c, uintptr(c), uintptr(unsafe.Pointer(&code))); err != nil {
		return err
	}
	if code == 0 || code == ncclInProgress {
		return nil
	}
	e := &Error{Call: "ncclCommGetAsyncError", Lib: "nccl", Code: int(code), Name: ncclResultNames[code]}
	if e.Name == "" {
		e.Name = fmt.Sprintf("ncclResult %d", code)
	}
	if s, err := pNcclGetErrorString.invoke(uintptr(code)); err == nil && s != 0 {
		e.Desc = cString(s)
	}
	return e
}

// Count returns the number of ranks in c.
func (c Comm) Count() (int, error) {
	var n int32
	err := nccl(pNcclCommCount, c, uintptr(c), uintptr(unsafe.Pointer(&n)))
	return int(n), err
}

// Rank returns the caller's rank in c.
func (c Comm) Rank() (int, error) {
	var r int32
	err := nccl(pNcclCommUserRank, c, uintptr(c), uintptr(unsafe.Pointer(&r)))
	return int(r), err
}

// AllReduce queues recv = op over all ranks of send (count elements) on s.
// send and recv may be the same buffer.
func (c Comm) AllReduce(send, recv DevicePtr, count int, t NCCLDataType, op NCCLRedOp, s Stream) error {
	return nccl(pNcclAllReduce, c, uintptr(send), uintptr(recv), uintptr(count), uintptr(t), uintptr(op), uintptr(c), uintptr(s))
}

// Broadcast queues copying root's send buffer into every rank's recv on s.
func (c Comm) Broadcast(send, recv DevicePtr, count int, t NCCLDataType, root int, s Stream) error {
	return nccl(pNcclBroadcast, c, uintptr(send), uintptr(recv), uintptr(count), uintptr(t), uintptr(root), uintptr(c), uintptr(s))
}

// NCCLGroupStart opens a group of NCCL calls issued together.
func NCCLGroupStart() error { return nccl(pNcclGroupStart, 0) }

// NCCLGroupEnd closes a group opened by NCCLGroupStart.
func NCCLGroupEnd() error { return nccl(pNcclGroupEnd, 0) }

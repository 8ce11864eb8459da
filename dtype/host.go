package dtype

import "unsafe"

// HostLittleEndian reports whether the host stores numbers little-endian, as
// the file formats read and written here do: then a []float32's memory is
// its F32 bytes, and a file's bytes can be viewed in place.
var HostLittleEndian = func() bool { x := uint16(1); return *(*byte)(unsafe.Pointer(&x)) == 1 }()

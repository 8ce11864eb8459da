package jit

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"strconv"
)

// FormatVersion is the cache-format version: part of every key and of every
// disk file's header. Bump it when the key or the file layout changes.
const FormatVersion = 2

// Source is one kernel program to compile.
type Source struct {
	Family  string            // kernel family, e.g. "flex_fwd": groups keys for the budget
	Name    string            // program name in compiler messages; default Family + ".cu"
	Code    string            // CUDA C++ source
	Options []string          // compiler options, in order (e.g. "-DFLEX_D=128", "-std=c++17")
	Arch    string            // target, e.g. "sm_90" (CUBIN) or "compute_90" (PTX)
	Params  map[string]string // structural parameters the code was generated from (descriptive)
}

// ProgramName returns the name the compiler reports errors under.
func (s Source) ProgramName() string {
	if s.Name != "" {
		return s.Name
	}
	if s.Family != "" {
		return s.Family + ".cu"
	}
	return "kernel.cu"
}

// Key identifies a compiled image: SHA-256 of the parts listed in KeyOf.
type Key [32]byte

// String returns the key in hex.
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// Short returns the first 12 hex digits, for messages.
func (k Key) Short() string { return k.String()[:12] }

// KeyOf returns the cache key of src compiled by a compiler of the given
// version: SHA-256 over the format version, src.Code, src.Options (count and
// each, in order), src.Arch and compilerVersion, each length-prefixed so no
// two different inputs share an encoding.
func KeyOf(src Source, compilerVersion string) Key {
	h := sha256.New()
	put := func(s string) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	put("dflash kernel cache")
	put(strconv.Itoa(FormatVersion))
	put(src.Code)
	put(strconv.Itoa(len(src.Options)))
	for _, o := range src.Options {
		put(o)
	}
	put(src.Arch)
	put(compilerVersion)
	return sum(h)
}

func sum(h hash.Hash) Key {
	var k Key
	h.Sum(k[:0])
	return k
}

// srcKey indexes the memory tier by the key's inputs, so a hit compares
// strings instead of hashing the source again. Map lookups compare every
// field, so a hit is a comparison of the whole key; the encoding of the
// options must therefore be injective: no option byte is reserved, so for
// two or more options each is length-prefixed (uvarint, prefix-free), and
// nopts tells zero, one and many apart.
type srcKey struct {
	code, opts, arch string
	nopts            int
}

func makeSrcKey(src Source) srcKey {
	k := srcKey{code: src.Code, arch: src.Arch, nopts: len(src.Options)}
	switch len(src.Options) {
	case 0:
	case 1:
		k.opts = src.Options[0]
	default:
		n := 0
		for _, o := range src.Options {
			n += len(o) + binary.MaxVarintLen64
		}
		b := make([]byte, 0, n)
		for _, o := range src.Options {
			b = binary.AppendUvarint(b, uint64(len(o)))
			b = append(b, o...)
		}
		k.opts = string(b)
	}
	return k
}

package shard

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

const (
	magic      = "DFSHARD\x00"
	version    = 1
	headerSize = 64
	// FormatName is meta.json's "format".
	FormatName = "dflash-shards"
	// MetaFile is the name of the dataset description.
	MetaFile = "meta.json"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// header is the fixed start of a shard file.
type header struct {
	n, t                     uint64
	offsOff, idsOff, maskOff uint64
	crc                      uint32
}

// layout returns the section offsets and file size of a shard of n samples
// and t tokens.
func layout(n, t uint64) (offsOff, idsOff, maskOff, size uint64) {
	offsOff = headerSize
	idsOff = offsOff + 8*(n+1) // 8-aligned since the header is
	maskOff = idsOff + 4*t
	return offsOff, idsOff, maskOff, maskOff + t
}

func (h header) encode() []byte {
	b := make([]byte, headerSize)
	copy(b, magic)
	binary.LittleEndian.PutUint32(b[8:], version)
	binary.LittleEndian.PutUint64(b[16:], h.n)
	binary.LittleEndian.PutUint64(b[24:], h.t)
	binary.LittleEndian.PutUint64(b[32:], h.offsOff)
	binary.LittleEndian.PutUint64(b[40:], h.idsOff)
	binary.LittleEndian.PutUint64(b[48:], h.maskOff)
	binary.LittleEndian.PutUint32(b[56:], h.crc)
	return b
}

// decodeHeader checks the header of the shard file b (the whole file).
func decodeHeader(b []byte) (header, error) {
	var h header
	size := uint64(len(b))
	if len(b) < headerSize || string(b[:8]) != magic {
		return h, fmt.Errorf("not a dflash shard (bad magic)")
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != version {
		return h, fmt.Errorf("shard version %d, this dflash reads %d", v, version)
	}
	h.n = binary.LittleEndian.Uint64(b[16:])
	h.t = binary.LittleEndian.Uint64(b[24:])
	h.offsOff = binary.LittleEndian.Uint64(b[32:])
	h.idsOff = binary.LittleEndian.Uint64(b[40:])
	h.maskOff = binary.LittleEndian.Uint64(b[48:])
	h.crc = binary.LittleEndian.Uint32(b[56:])
	if h.n > size || h.t > size {
		return h, fmt.Errorf("header counts (%d samples, %d tokens) exceed the file size %d", h.n, h.t, size)
	}
	o, i, m, want := layout(h.n, h.t)
	if h.offsOff != o || h.idsOff != i || h.maskOff != m || size != want {
		return h, fmt.Errorf("header layout does not match %d samples, %d tokens in %d bytes (truncated or foreign file)", h.n, h.t, size)
	}
	return h, nil
}

// ShardInfo describes one shard file in meta.json.
type ShardInfo struct {
	File    string `json:"file"`
	Samples int64  `json:"samples"`
	Tokens  int64  `json:"tokens"`
	MinLen  int    `json:"min_len"`
	MaxLen  int    `json:"max_len"`
	CRC32C  uint32 `json:"crc32c"`
	// MaxID is the largest token id (absent in directories written before
	// it was recorded; Verify computes it either way).
	MaxID *int32 `json:"max_id,omitempty"`
}

// Meta is the content of meta.json.
type Meta struct {
	Format     string      `json:"format"`
	Version    int         `json:"version"`
	Samples    int64       `json:"samples"`
	Tokens     int64       `json:"tokens"`
	Supervised int64       `json:"supervised"`
	Shards     []ShardInfo `json:"shards"`
	Info       any         `json:"info,omitempty"`
}

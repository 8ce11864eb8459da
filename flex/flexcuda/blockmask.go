package flexcuda

import (
	"fmt"

	"dflash/cuda"
	"dflash/flex"
	"dflash/gpu"
)

// BlockMask is a flex.BlockMask on a device: the same eight int32 lists
// with the same layout (see flex.BlockMask), in one allocation. Entries past
// each list's count are unspecified.
type BlockMask struct {
	Dims                    flex.Dims
	BlockQ, BlockKV         int
	NumQBlocks, NumKVBlocks int
	MaskBatch, MaskHeads    int

	KVNum, KVIdx, FullKVNum, FullKVIdx gpu.Buffer
	QNum, QIdx, FullQNum, FullQIdx     gpu.Buffer

	base gpu.Buffer
}

// blockMaskShape returns the geometry of a mask over d.
func blockMaskShape(d flex.Dims, blockQ, blockKV, maskBatch, maskHeads int) *BlockMask {
	return &BlockMask{Dims: d, BlockQ: blockQ, BlockKV: blockKV,
		NumQBlocks: (d.LenQ + blockQ - 1) / blockQ, NumKVBlocks: (d.LenKV + blockKV - 1) / blockKV,
		MaskBatch: maskBatch, MaskHeads: maskHeads}
}

// sizes returns the element counts of the eight lists, in field order.
func (m *BlockMask) sizes() [8]int {
	bh := m.MaskBatch * m.MaskHeads
	rows, cols := bh*m.NumQBlocks, bh*m.NumKVBlocks
	return [8]int{rows, rows * m.NumKVBlocks, rows, rows * m.NumKVBlocks, cols, cols * m.NumQBlocks, cols, cols * m.NumQBlocks}
}

func (m *BlockMask) lists() [8]*gpu.Buffer {
	return [8]*gpu.Buffer{&m.KVNum, &m.KVIdx, &m.FullKVNum, &m.FullKVIdx, &m.QNum, &m.QIdx, &m.FullQNum, &m.FullQIdx}
}

// alloc gives m its buffers, reusing old's allocation when it is big enough
// (old is then consumed).
func (m *BlockMask) alloc(d *gpu.Device, old *BlockMask) error {
	total := int64(0)
	for _, n := range m.sizes() {
		total += int64(4 * n)
	}
	if old != nil && old.base.Size >= total {
		m.base = old.base
	} else {
		if old != nil {
			old.Free(d)
		}
		b, err := d.Alloc(total)
		if err != nil {
			return fmt.Errorf("flexcuda: block mask lists (%d bytes): %w", total, err)
		}
		m.base = b
	}
	off := int64(0)
	ls := m.lists()
	for i, n := range m.sizes() {
		*ls[i] = gpu.Buffer{Ptr: m.base.Ptr + cuda.DevicePtr(off), Size: int64(4 * n)}
		off += int64(4 * n)
	}
	return nil
}

// Free releases m's device memory.
func (m *BlockMask) Free(d *gpu.Device) {
	if m.base.Size > 0 {
		d.Free(m.base)
		m.base = gpu.Buffer{}
	}
}

// UploadBlockMask copies a CPU-built block mask to d, reusing into's memory
// when it is big enough (into may be nil).
func UploadBlockMask(d *gpu.Device, bm *flex.BlockMask, into *BlockMask) (*BlockMask, error) {
	m := blockMaskShape(bm.Dims, bm.BlockQ, bm.BlockKV, bm.MaskBatch, bm.MaskHeads)
	if m.NumQBlocks != bm.NumQBlocks || m.NumKVBlocks != bm.NumKVBlocks {
		panic(fmt.Sprintf("flexcuda: block mask geometry %dx%d does not match its dims %+v", bm.NumQBlocks, bm.NumKVBlocks, bm.Dims))
	}
	if err := m.alloc(d, into); err != nil {
		return nil, err
	}
	host := make([]int32, 0, m.base.Size/4)
	for _, l := range [][]int32{bm.KVNum, bm.KVIdx, bm.FullKVNum, bm.FullKVIdx, bm.QNum, bm.QIdx, bm.FullQNum, bm.FullQIdx} {
		host = append(host, l...)
	}
	if err := gpu.Stage(d, m.base, host); err != nil {
		m.Free(d)
		return nil, fmt.Errorf("flexcuda: upload block mask: %w", err)
	}
	return m, nil
}

// HostLists are a BlockMask's lists copied back to the host.
type HostLists struct {
	KVNum, KVIdx, FullKVNum, FullKVIdx []int32
	QNum, QIdx, FullQNum, FullQIdx     []int32
}

// Download copies m's lists to the host (for tests and tools).
func (m *BlockMask) Download(d *gpu.Device) (*HostLists, error) {
	var all []int32
	for _, n := range m.sizes() {
		all = append(all, make([]int32, n)...)
	}
	if err := gpu.Download(d, all, m.base); err != nil {
		return nil, fmt.Errorf("flexcuda: download block mask: %w", err)
	}
	h := &HostLists{}
	dst := [8]*[]int32{&h.KVNum, &h.KVIdx, &h.FullKVNum, &h.FullKVIdx, &h.QNum, &h.QIdx, &h.FullQNum, &h.FullQIdx}
	off := 0
	for i, n := range m.sizes() {
		*dst[i] = all[off : off+n]
		off += n
	}
	return h, nil
}

// Compare reports the first difference between the lists of h (geometry m)
// and those of a CPU block mask, comparing each list up to its count; ""
// when they are equal.
func (h *HostLists) Compare(m *BlockMask, bm *flex.BlockMask) string {
	if m.NumQBlocks != bm.NumQBlocks || m.NumKVBlocks != bm.NumKVBlocks || m.MaskBatch != bm.MaskBatch || m.MaskHeads != bm.MaskHeads {
		return fmt.Sprintf("geometry %dx%d batch %d heads %d, want %dx%d batch %d heads %d", m.NumQBlocks, m.NumKVBlocks,
			m.MaskBatch, m.MaskHeads, bm.NumQBlocks, bm.NumKVBlocks, bm.MaskBatch, bm.MaskHeads)
	}
	type pair struct {
		name       string
		num, idx   []int32
		wnum, widx []int32
		width      int
	}
	for _, p := range []pair{
		{"kv partial", h.KVNum, h.KVIdx, bm.KVNum, bm.KVIdx, m.NumKVBlocks},
		{"kv full", h.FullKVNum, h.FullKVIdx, bm.FullKVNum, bm.FullKVIdx, m.NumKVBlocks},
		{"q partial", h.QNum, h.QIdx, bm.QNum, bm.QIdx, m.NumQBlocks},
		{"q full", h.FullQNum, h.FullQIdx, bm.FullQNum, bm.FullQIdx, m.NumQBlocks},
	} {
		for r := range p.wnum {
			if p.num[r] != p.wnum[r] {
				return fmt.Sprintf("%s list %d: %d blocks, want %d", p.name, r, p.num[r], p.wnum[r])
			}
			o := r * p.width
			for i := 0; i < int(p.num[r]); i++ {
				if p.idx[o+i] != p.widx[o+i] {
					return fmt.Sprintf("%s list %d entry %d: block %d, want %d", p.name, r, i, p.idx[o+i], p.widx[o+i])
				}
			}
		}
	}
	return ""
}

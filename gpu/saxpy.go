package gpu

import (
	"fmt"

	"dflash/cuda"
)

// Saxpy returns a*x + y computed on d by fn, the saxpy kernel of
// kernels/saxpy.cu: the end-to-end smoke test (upload, launch, download)
// that dflash doctor, nccl check and the GPU tests share. It runs on d's
// thread (inside Worker.Run or Submit); x and y are left unchanged.
func Saxpy(d *Device, fn cuda.Function, a float32, x, y []float32) ([]float32, error) {
	if len(x) != len(y) {
		panic(fmt.Sprintf("gpu: Saxpy: %d x values, %d y values", len(x), len(y)))
	}
	n := len(x)
	dx, err := d.Alloc(int64(4 * n))
	if err != nil {
		return nil, err
	}
	defer d.Free(dx)
	dy, err := d.Alloc(int64(4 * n))
	if err != nil {
		return nil, err
	}
	defer d.Free(dy)
	if err := Upload(d, dx, x); err != nil {
		return nil, err
	}
	if err := Upload(d, dy, y); err != nil {
		return nil, err
	}
	const block = 256
	if err := d.Launch(fn, cuda.Dim(uint32((n+block-1)/block), 1, 1), cuda.Dim(block, 1, 1), 0, nil,
		cuda.NewArgs().F32(a).Ptr(dx.Ptr).Ptr(dy.Ptr).I32(int32(n))); err != nil {
		return nil, err
	}
	out := make([]float32, n)
	if err := Download(d, out, dy); err != nil {
		return nil, err
	}
	return out, nil
}

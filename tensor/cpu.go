package tensor

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
)

// CPU is the pure-Go backend, parallel over goroutines. CPU[float32] is the
// training backend; CPU[float64] is the conformance reference.
type CPU[T Float] struct {
	workers int
	gemm    GemmPath
}

// NewCPU returns a CPU backend using GOMAXPROCS goroutines (workers ≤ 0) or workers.
func NewCPU[T Float](workers int) *CPU[T] {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	return &CPU[T]{workers: workers}
}

// WithGemm returns a copy of c that computes GEMMs on path p (for tests and
// measurements; GemmAuto is the default).
func (c *CPU[T]) WithGemm(p GemmPath) *CPU[T] { return &CPU[T]{workers: c.workers, gemm: p} }

// Name returns "cpu-f32" or "cpu-f64".
func (c *CPU[T]) Name() string {
	var z T
	if _, ok := any(z).(float32); ok {
		return "cpu-f32"
	}
	return "cpu-f64"
}

// Workers returns the number of goroutines the backend splits work over.
func (c *CPU[T]) Workers() int { return c.workers }

// parallel splits [0, n) into at most c.workers contiguous ranges of at least
// grain items and runs f on each, concurrently when there is more than one.
func (c *CPU[T]) parallel(n, grain int, f func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if grain < 1 {
		grain = 1
	}
	parts := min(c.workers, (n+grain-1)/grain)
	if parts <= 1 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	for p := range parts {
		lo, hi := p*n/parts, (p+1)*n/parts
		if p == parts-1 {
			f(lo, hi)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(lo, hi)
		}()
	}
	wg.Wait()
}

// Axpy computes y += alpha·x.
func (c *CPU[T]) Axpy(alpha T, xS Storage[T], yS Storage[T]) {
	x := HostData(xS, "Axpy x")
	y := HostData(yS, "Axpy y")
	checkLen("Axpy", len(x), len(y))
	c.parallel(len(x), 1<<15, func(lo, hi int) {
		ys := y[lo:hi]
		for i, v := range x[lo:hi] {
			ys[i] += alpha * v
		}
	})
}

// Add computes out = a + b.
func (c *CPU[T]) Add(aS, bS, outS Storage[T]) {
	a := HostData(aS, "Add a")
	b := HostData(bS, "Add b")
	out := HostData(outS, "Add out")
	checkLen("Add b", len(b), len(a))
	checkLen("Add out", len(out), len(a))
	c.parallel(len(a), 1<<15, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out[i] = a[i] + b[i]
		}
	})
}

// Scale computes x *= alpha.
func (c *CPU[T]) Scale(alpha T, xS Storage[T]) {
	x := HostData(xS, "Scale x")
	c.parallel(len(x), 1<<15, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x[i] *= alpha
		}
	})
}

// AddRows computes y[r,:] += v.
func (c *CPU[T]) AddRows(yS Storage[T], vS Storage[T]) {
	y, v := rowsData("AddRows", yS, vS)
	n := len(v)
	c.parallel(len(y)/n, 1<<15/n+1, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			row := y[r*n : r*n+n]
			for i, b := range v {
				row[i] += b
			}
		}
	})
}

// rowsData returns the host data of y and v; it panics, naming op, unless y
// is whole rows of v's length.
func rowsData[T Float](op string, yS, vS Storage[T]) (y, v []T) {
	y, v = HostData(yS, op+" y"), HostData(vS, op+" v")
	if len(v) == 0 || len(y)%len(v) != 0 {
		panic(fmt.Sprintf("tensor: %s: %d elements are not rows of %d", op, len(y), len(v)))
	}
	return y, v
}

// SumRows computes v += Σ_r y[r,:].
func (c *CPU[T]) SumRows(yS Storage[T], vS Storage[T]) {
	y, v := rowsData("SumRows", yS, vS)
	n := len(v)
	c.parallel(n, 64, func(lo, hi int) {
		acc := make([]float64, hi-lo)
		for r := 0; r < len(y)/n; r++ {
			row := y[r*n+lo : r*n+hi]
			for i, x := range row {
				acc[i] += float64(x)
			}
		}
		for i, a := range acc {
			v[lo+i] += T(a)
		}
	})
}

// Copy2D copies (or adds) a rows×cols block between strided buffers.
func (c *CPU[T]) Copy2D(rows int, cols int, srcS Storage[T], srcStride int, srcOff int, dstS Storage[T], dstStride int, dstOff int, accumulate bool) {
	src := HostData(srcS, "Copy2D src")
	dst := HostData(dstS, "Copy2D dst")
	if rows == 0 || cols == 0 {
		return
	}
	if srcOff+cols > srcStride && rows > 1 || dstOff+cols > dstStride && rows > 1 {
		panic(fmt.Sprintf("tensor: Copy2D: block of %d cols at offsets %d/%d exceeds strides %d/%d", cols, srcOff, dstOff, srcStride, dstStride))
	}
	_ = src[(rows-1)*srcStride+srcOff+cols-1]
	_ = dst[(rows-1)*dstStride+dstOff+cols-1]
	c.parallel(rows, 1<<14/cols+1, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			s := src[r*srcStride+srcOff : r*srcStride+srcOff+cols]
			d := dst[r*dstStride+dstOff : r*dstStride+dstOff+cols]
			if accumulate {
				for i, v := range s {
					d[i] += v
				}
			} else {
				copy(d, s)
			}
		}
	})
}

// Transpose12 permutes [A, B, C, D] to [A, C, B, D].
func (c *CPU[T]) Transpose12(a int, b int, cc int, d int, srcS Storage[T], dstS Storage[T], accumulate bool) {
	src := HostData(srcS, "Transpose12 src")
	dst := HostData(dstS, "Transpose12 dst")
	n := a * b * cc * d
	checkLen("Transpose12 src", len(src), n)
	checkLen("Transpose12 dst", len(dst), n)
	c.parallel(a*b, 1<<14/(cc*d+1)+1, func(lo, hi int) {
		for ab := lo; ab < hi; ab++ {
			ia, ib := ab/b, ab%b
			for ic := 0; ic < cc; ic++ {
				s := src[((ia*b+ib)*cc+ic)*d:][:d]
				o := dst[((ia*cc+ic)*b+ib)*d:][:d]
				if accumulate {
					for i, v := range s {
						o[i] += v
					}
				} else {
					copy(o, s)
				}
			}
		}
	})
}

// Gather copies table rows: out[i,:] = table[ids[i],:].
func (c *CPU[T]) Gather(tableS Storage[T], dim int, idsS Ints, outS Storage[T]) {
	table := HostData(tableS, "Gather table")
	ids := HostIntData(idsS, "Gather ids")
	out := HostData(outS, "Gather out")
	checkLen("Gather out", len(out), len(ids)*dim)
	rows := len(table) / dim
	c.parallel(len(ids), 1<<14/dim+1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			id := int(ids[i])
			if id < 0 || id >= rows {
				panic(fmt.Sprintf("tensor: Gather: id %d at %d out of range [0,%d)", id, i, rows))
			}
			copy(out[i*dim:i*dim+dim], table[id*dim:id*dim+dim])
		}
	})
}

// ScatterAdd accumulates dtable[ids[i],:] += dout[i,:]. Work is split by
// column range so that repeated ids never race.
func (c *CPU[T]) ScatterAdd(doutS Storage[T], dim int, idsS Ints, dtableS Storage[T]) {
	dout := HostData(doutS, "ScatterAdd dout")
	ids := HostIntData(idsS, "ScatterAdd ids")
	dtable := HostData(dtableS, "ScatterAdd dtable")
	checkLen("ScatterAdd dout", len(dout), len(ids)*dim)
	c.parallel(dim, 32, func(lo, hi int) {
		for i, id := range ids {
			d := dtable[int(id)*dim+lo : int(id)*dim+hi]
			for j, v := range dout[i*dim+lo : i*dim+hi] {
				d[j] += v
			}
		}
	})
}

// RMSNorm computes y = x·rstd·w per row, rstd = 1/sqrt(mean(x²)+eps).
func (c *CPU[T]) RMSNorm(xS Storage[T], wS Storage[T], dim int, eps float64, yS Storage[T], rstdS Storage[T]) {
	x := HostData(xS, "RMSNorm x")
	w := HostData(wS, "RMSNorm w")
	y := HostData(yS, "RMSNorm y")
	rstd := HostData(rstdS, "RMSNorm rstd")
	rows := len(x) / dim
	checkLen("RMSNorm w", len(w), dim)
	checkLen("RMSNorm y", len(y), len(x))
	checkLen("RMSNorm rstd", len(rstd), rows)
	c.parallel(rows, 1<<13/dim+1, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xs := x[r*dim : r*dim+dim]
			var ss float64
			for _, v := range xs {
				ss += float64(v) * float64(v)
			}
			rs := 1 / math.Sqrt(ss/float64(dim)+eps)
			rstd[r] = T(rs)
			ys := y[r*dim : r*dim+dim]
			for i, v := range xs {
				ys[i] = T(float64(v)*rs) * w[i]
			}
		}
	})
}

// RMSNormBackward writes (or with accumulate adds) dx and adds dw, the
// gradients of RMSNorm.
func (c *CPU[T]) RMSNormBackward(xS Storage[T], wS Storage[T], rstdS Storage[T], dyS Storage[T], dim int, dxS Storage[T], dwS Storage[T], accumulate bool) {
	x := HostData(xS, "RMSNormBackward x")
	w := HostData(wS, "RMSNormBackward w")
	rstd := HostData(rstdS, "RMSNormBackward rstd")
	dy := HostData(dyS, "RMSNormBackward dy")
	dx := HostData(dxS, "RMSNormBackward dx")
	dw := HostData(dwS, "RMSNormBackward dw")
	rows := len(x) / dim
	if dx != nil {
		c.parallel(rows, 1<<13/dim+1, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				xs, dys, dxs := x[r*dim:r*dim+dim], dy[r*dim:r*dim+dim], dx[r*dim:r*dim+dim]
				rs := float64(rstd[r])
				var dot float64 // Σ g·x̂
				for i, v := range xs {
					dot += float64(dys[i]) * float64(w[i]) * float64(v) * rs
				}
				m := dot / float64(dim)
				for i, v := range xs {
					g := float64(dys[i]) * float64(w[i])
					put(dxs, i, T(rs*(g-float64(v)*rs*m)), accumulate)
				}
			}
		})
	}
	if dw != nil {
		c.parallel(dim, 32, func(lo, hi int) {
			acc := make([]float64, hi-lo)
			for r := 0; r < rows; r++ {
				rs := float64(rstd[r])
				xs, dys := x[r*dim+lo:r*dim+hi], dy[r*dim+lo:r*dim+hi]
				for i, v := range xs {
					acc[i] += float64(dys[i]) * float64(v) * rs
				}
			}
			for i, a := range acc {
				dw[lo+i] += T(a)
			}
		})
	}
}

// RoPE rotates heads by per-row angles (HF rotate_half convention),
// writing y or with accumulate adding to it.
func (c *CPU[T]) RoPE(xS Storage[T], heads int, headDim int, cosS Storage[T], sinS Storage[T], yS Storage[T], inverse, accumulate bool) {
	x := HostData(xS, "RoPE x")
	cos := HostData(cosS, "RoPE cos")
	sin := HostData(sinS, "RoPE sin")
	y := HostData(yS, "RoPE y")
	h := headDim / 2
	rows := len(x) / (heads * headDim)
	checkLen("RoPE cos", len(cos), rows*h)
	checkLen("RoPE y", len(y), len(x))
	c.parallel(rows, 1<<12/(heads*headDim)+1, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			cs, sn := cos[r*h:r*h+h], sin[r*h:r*h+h]
			for hd := 0; hd < heads; hd++ {
				base := (r*heads + hd) * headDim
				x1, x2 := x[base:base+h], x[base+h:base+2*h]
				y1, y2 := y[base:base+h], y[base+h:base+2*h]
				s := T(1) // the sign of the angle
				if inverse {
					s = -1
				}
				for i := range h {
					a, b := x1[i], x2[i]
					put(y1, i, a*cs[i]-s*b*sn[i], accumulate)
					put(y2, i, b*cs[i]+s*a*sn[i], accumulate)
				}
			}
		}
	})
}

// put sets d[i] to v, or adds v to it with accumulate.
func put[T Float](d []T, i int, v T, accumulate bool) {
	if accumulate {
		v += d[i]
	}
	d[i] = v
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// SoftmaxXent computes per-row cross-entropy and overwrites logits with its scaled gradient.
func (c *CPU[T]) SoftmaxXent(logitsS Storage[T], rows int, vocab int, targetsS Ints, scaleS Storage[T], lossS Storage[T], argmaxS Ints) {
	logits := HostData(logitsS, "SoftmaxXent logits")
	targets := HostIntData(targetsS, "SoftmaxXent targets")
	scale := HostData(scaleS, "SoftmaxXent scale")
	loss := HostData(lossS, "SoftmaxXent loss")
	argmax := HostIntData(argmaxS, "SoftmaxXent argmax")
	checkLen("SoftmaxXent logits", len(logits), rows*vocab)
	c.parallel(rows, 1, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			row := logits[r*vocab : r*vocab+vocab]
			t := int(targets[r])
			if t < 0 {
				clear(row)
				loss[r], argmax[r] = 0, -1
				continue
			}
			if t >= vocab {
				panic(fmt.Sprintf("tensor: SoftmaxXent: target %d in row %d out of range [0,%d)", t, r, vocab))
			}
			mx, am := row[0], 0
			for i, v := range row {
				if v > mx {
					mx, am = v, i
				}
			}
			zt := float64(row[t] - mx)
			var sum float64
			for i, v := range row { // row holds exp(z − max) from here on
				e := math.Exp(float64(v - mx))
				row[i] = T(e)
				sum += e
			}
			loss[r] = T(math.Log(sum) - zt)
			argmax[r] = int32(am)
			s := T(float64(scale[r]) / sum)
			for i := range row {
				row[i] *= s
			}
			row[t] -= scale[r]
		}
	})
}

func checkLen(what string, got, want int) {
	if got != want {
		panic(fmt.Sprintf("tensor: %s: length %d, want %d", what, got, want))
	}
}

// Alloc returns n zero elements of host memory.
func (c *CPU[T]) Alloc(n int) Storage[T] { return make(Host[T], n) }

// AllocStat returns n zero elements of host memory (statistics are T too).
func (c *CPU[T]) AllocStat(n int) Storage[T] { return make(Host[T], n) }

// Upload returns a copy of x.
func (c *CPU[T]) Upload(x []T, stat bool) Storage[T] { return Host[T](slices.Clone(x)) }

// Download copies s into dst.
func (c *CPU[T]) Download(s Storage[T], dst []T) {
	src := HostData(s, "Download")
	checkLen("Download", len(dst), len(src))
	copy(dst, src)
}

// AllocHost returns n zero elements of host memory.
func (c *CPU[T]) AllocHost(n int) ([]T, error) { return make([]T, n), nil }

// FreeHost does nothing: host memory is the garbage collector's.
func (c *CPU[T]) FreeHost([]T) error { return nil }

// AllocInts returns n zero int32 elements of host memory.
func (c *CPU[T]) AllocInts(n int) Ints { return make(HostInts, n) }

// UploadInts returns a copy of x.
func (c *CPU[T]) UploadInts(x []int32) Ints { return HostInts(slices.Clone(x)) }

// DownloadInts copies s into dst.
func (c *CPU[T]) DownloadInts(s Ints, dst []int32) {
	src := HostIntData(s, "DownloadInts")
	checkLen("DownloadInts", len(dst), len(src))
	copy(dst, src)
}

// Fill sets every element of s to v.
func (c *CPU[T]) Fill(s Storage[T], v float64) {
	x := HostData(s, "Fill")
	for i := range x {
		x[i] = T(v)
	}
}

// AxpyBy computes y += alpha·s[0]·x.
func (c *CPU[T]) AxpyBy(alpha T, s, x, y Storage[T]) {
	c.Axpy(alpha*HostData(s, "AxpyBy scalar")[0], x, y)
}

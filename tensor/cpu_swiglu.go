package tensor

// SwiGLU computes out = silu(gate)·up.
func (c *CPU[T]) SwiGLU(gateS Storage[T], upS Storage[T], outS Storage[T]) {
	gate := HostData(gateS, "SwiGLU gate")
	up := HostData(upS, "SwiGLU up")
	out := HostData(outS, "SwiGLU out")
	checkLen("SwiGLU up", len(up), len(gate))
	checkLen("SwiGLU out", len(out), len(gate))
	c.parallel(len(gate), 1<<13, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out[i] = swiglu(gate[i], up[i])
		}
	})
}

// SwiGLUBackward writes (or with accumulate adds) the gradients of SwiGLU.
func (c *CPU[T]) SwiGLUBackward(gateS Storage[T], upS Storage[T], doutS Storage[T], dgateS Storage[T], dupS Storage[T], accumulate bool) {
	gate := HostData(gateS, "SwiGLUBackward gate")
	up := HostData(upS, "SwiGLUBackward up")
	dout := HostData(doutS, "SwiGLUBackward dout")
	dgate := HostData(dgateS, "SwiGLUBackward dgate")
	dup := HostData(dupS, "SwiGLUBackward dup")
	c.parallel(len(gate), 1<<13, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			dg, du := swigluGrads(gate[i], up[i], dout[i])
			if dgate != nil {
				put(dgate, i, dg, accumulate)
			}
			if dup != nil {
				put(dup, i, du, accumulate)
			}
		}
	})
}

// SwiGLUPacked computes out[r,c] = silu(y2[r,c])·y2[r,cols+c].
func (c *CPU[T]) SwiGLUPacked(y2S Storage[T], cols int, outS Storage[T]) {
	y2 := HostData(y2S, "SwiGLUPacked y2")
	out := HostData(outS, "SwiGLUPacked out")
	checkLen("SwiGLUPacked y2", len(y2), 2*len(out))
	c.parallel(len(out), 1<<13, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			j := i + i/cols*cols // gate's index in y2; up's is j+cols
			out[i] = swiglu(y2[j], y2[j+cols])
		}
	})
}

// SwiGLUPackedBackward writes (or with accumulate adds) the gradients of
// SwiGLUPacked: gate's in the first cols columns of each row of dy2, up's
// in the last.
func (c *CPU[T]) SwiGLUPackedBackward(y2S, doutS Storage[T], cols int, dy2S Storage[T], accumulate bool) {
	y2 := HostData(y2S, "SwiGLUPackedBackward y2")
	dout := HostData(doutS, "SwiGLUPackedBackward dout")
	dy2 := HostData(dy2S, "SwiGLUPackedBackward dy2")
	checkLen("SwiGLUPackedBackward y2", len(y2), 2*len(dout))
	checkLen("SwiGLUPackedBackward dy2", len(dy2), 2*len(dout))
	c.parallel(len(dout), 1<<13, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			j := i + i/cols*cols
			dg, du := swigluGrads(y2[j], y2[j+cols], dout[i])
			put(dy2, j, dg, accumulate)
			put(dy2, j+cols, du, accumulate)
		}
	})
}

// swiglu returns silu(g)·u with silu(g) = g·σ(g), in float64.
func swiglu[T Float](g, u T) T {
	x := float64(g)
	return T(x*sigmoid(x)) * u
}

// swigluGrads returns the gradients of silu(g)·u for upstream d:
// d·u·σ(g)·(1 + g·(1−σ(g))) and d·silu(g).
func swigluGrads[T Float](g, u, d T) (dg, du T) {
	x := float64(g)
	s := sigmoid(x)
	return T(float64(d) * float64(u) * s * (1 + x*(1-s))), T(float64(d) * x * s)
}

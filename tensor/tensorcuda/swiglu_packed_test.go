package tensorcuda

import (
	"fmt"
	"testing"
)

// TestGPUSwiGLUPacked checks the packed SwiGLU kernels against the unfused
// reference on the two halves of each row: rows × cols of 1×1, 3×7 and
// 37×100 run the scalar loop, 5×64 and 300×4096 the vector one; the
// backward accumulates into dy2, writes it (poisoned before), and writes
// it over y2 itself, as the tape's MLP does.
func TestGPUSwiGLUPacked(t *testing.T) {
	forDTypes(t, func(e *env) {
		tl := tol(e.dt, false)
		for _, rc := range [][2]int{{1, 1}, {3, 7}, {37, 100}, {5, 64}, {300, 4096}} {
			rows, cols := rc[0], rc[1]
			n, name := rows*cols, fmt.Sprintf("%dx%d", rows, cols)
			y2v := e.normal(2*n, 2)
			y2, y2v := e.store(y2v)
			gv, uv := make([]float64, n), make([]float64, n)
			for r := range rows {
				copy(gv[r*cols:], y2v[2*r*cols:2*r*cols+cols])
				copy(uv[r*cols:], y2v[2*r*cols+cols:2*r*cols+2*cols])
			}
			out := e.out(n)
			e.check(e.o.SwiGLUPacked(y2, out, int64(rows), cols))
			want := make([]float64, n)
			ref.SwiGLU(gv, uv, want)
			e.compare("SwiGLUPacked "+name, e.load(out, n), want, tl)

			dout, dov := e.store(e.normal(n, 1))
			// packed returns the reference's dgate and dup side by side,
			// on top of base (nil: written).
			packed := func(base []float64) []float64 {
				dg, du := make([]float64, n), make([]float64, n)
				ref.SwiGLUBackward(gv, uv, dov, dg, du, false)
				p := make([]float64, 2*n)
				for r := range rows {
					for c := range cols {
						p[2*r*cols+c], p[2*r*cols+cols+c] = dg[r*cols+c], du[r*cols+c]
					}
				}
				for i := range base {
					p[i] += base[i]
				}
				return p
			}
			dy2, basev := e.store(e.normal(2*n, 1))
			e.check(e.o.SwiGLUPackedBackward(y2, dout, dy2, int64(rows), cols, true))
			e.compare("SwiGLUPackedBackward accumulated "+name, e.load(dy2, 2*n), packed(basev), tl)

			w := e.out(2 * n)
			e.check(e.o.SwiGLUPackedBackward(y2, dout, w, int64(rows), cols, false))
			e.compare("SwiGLUPackedBackward written "+name, e.load(w, 2*n), packed(nil), tl)

			e.check(e.o.SwiGLUPackedBackward(y2, dout, y2, int64(rows), cols, false))
			e.compare("SwiGLUPackedBackward in place "+name, e.load(y2, 2*n), packed(nil), tl)
		}
	})
}

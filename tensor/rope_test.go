package tensor

import (
	"math"
	"sync"
	"testing"

	"dflash/internal/testseed"
)

// TestAnglesTable: Angles from r's table of positions equal cos and sin of
// pos·InvFreq computed directly for each position (bit for bit, in float32
// and float64), whatever order positions arrive in (the table grows when a
// larger one comes), for negative positions (not in the table) and from
// concurrent goroutines.
func TestAnglesTable(t *testing.T) {
	rng := testseed.New(t)
	r, err := NewRope(64, 1e6, &RopeScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192})
	if err != nil {
		t.Fatal(err)
	}
	r.AttentionScale = 1.25
	want := func(p int32, i int) (float64, float64) {
		s, c := math.Sincos(float64(p) * r.InvFreq[i])
		return c * r.AttentionScale, s * r.AttentionScale
	}
	check := func(pos []int32) {
		c32, s32 := Angles[float32](r, pos)
		c64, s64 := Angles[float64](r, pos)
		for j, p := range pos {
			for i := range 32 {
				c, s := want(p, i)
				if c64[j*32+i] != c || s64[j*32+i] != s || c32[j*32+i] != float32(c) || s32[j*32+i] != float32(s) {
					t.Errorf("position %d pair %d: got %v %v (%v %v), want %v %v", p, i, c64[j*32+i], s64[j*32+i], c32[j*32+i], s32[j*32+i], c, s)
					return
				}
			}
		}
	}
	for _, hi := range []int32{5, 3, 100, 7000, 20000} {
		pos := make([]int32, 300)
		for j := range pos {
			pos[j] = rng.Int32N(hi)
		}
		pos[0] = -int32(rng.IntN(50)) - 1
		check(pos)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		pos := make([]int32, 200)
		for j := range pos {
			pos[j] = int32(rng.IntN(40000 * (g + 1)))
		}
		wg.Go(func() { check(pos) })
	}
	wg.Wait()
}

// keeper is the CPU backend counting the tables it keeps (KeepStat) and
// their elements.
type keeper[T Float] struct {
	*CPU[T]
	calls, elems int
}

func (k *keeper[T]) KeepStat(x []T) Storage[T] {
	k.calls++
	k.elems += len(x)
	return k.Upload(x, true)
}

// TestTableKept: Table gathers rows from a table kept on the backend and
// returns, bit for bit, what Angles does for the same positions; the table
// is made on the first call, kept while the positions fit, made anew with
// at least twice the rows when one does not, and kept per backend. A negative position takes the Angles path and keeps nothing.
func TestTableKept(t *testing.T) {
	rng := testseed.New(t)
	r, err := NewRope(16, 1e4, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, b := &keeper[float32]{CPU: NewCPU[float32](1)}, &keeper[float32]{CPU: NewCPU[float32](1)}
	check := func(k *keeper[float32], hi int32, negative bool, calls, rows int) {
		t.Helper()
		pos := make([]int32, 77)
		for j := range pos {
			pos[j] = rng.Int32N(hi)
		}
		pos[3] = hi - 1
		if negative {
			pos[5] = -4
		}
		tab := Table[float32](k, r, pos)
		wc, ws := Angles[float32](r, pos)
		gc, gs := make([]float32, len(wc)), make([]float32, len(ws))
		k.Download(tab.Cos, gc)
		k.Download(tab.Sin, gs)
		for i := range wc {
			if gc[i] != wc[i] || gs[i] != ws[i] {
				t.Fatalf("positions below %d: element %d is %v %v, Angles %v %v", hi, i, gc[i], gs[i], wc[i], ws[i])
			}
		}
		if k.calls != calls || k.elems != 2*rows*8 {
			t.Errorf("positions below %d: %d tables kept of %d elements, want %d of %d rows", hi, k.calls, k.elems, calls, rows)
		}
	}
	check(a, 100, false, 2, 100)       // cos and sin of positions 0..99
	check(a, 60, false, 2, 100)        // they fit
	check(a, 130, false, 4, 100+200)   // twice the rows
	check(a, 1000, false, 6, 300+1000) // the positions asked for
	check(a, 2000, true, 6, 300+1000)  // a negative position: Angles uploaded
	check(b, 50, false, 2, 50)         // another backend, its own table
	check(a, 1000, false, 6, 300+1000) // a's still fits
}

package flex

import (
	"bytes"
	"flag"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/cuda")

// libraryPrograms builds every library program afresh.
func libraryPrograms() (masks []*MaskProgram, scores []*ScoreProgram) {
	masks = []*MaskProgram{Causal(), SlidingWindow(64), PrefixLM(), Document(true), Document(false), DFlashMask(16)}
	scores = []*ScoreProgram{Softcap(30), SoftcapScalar(), ALiBi(), RelativeBias(8)}
	return
}

// TestCUDAGolden checks the generated CUDA C of the library programs
// against testdata/cuda/*.cu (go test ./flex -run CUDAGolden -update
// rewrites them), and that generation is deterministic.
func TestCUDAGolden(t *testing.T) {
	m1, s1 := libraryPrograms()
	m2, s2 := libraryPrograms()
	var texts []struct{ name, a, b string }
	for i := range m1 {
		texts = append(texts, struct{ name, a, b string }{m1[i].Name(), m1[i].CUDA("mask_fn"), m2[i].CUDA("mask_fn")})
	}
	for i := range s1 {
		texts = append(texts, struct{ name, a, b string }{s1[i].Name(), s1[i].CUDA("score_fn"), s2[i].CUDA("score_fn")})
		texts = append(texts, struct{ name, a, b string }{s1[i].Name() + "_bwd", s1[i].CUDABackward("score_bwd"), s2[i].CUDABackward("score_bwd")})
	}
	for _, x := range texts {
		if x.a != x.b {
			t.Fatalf("%s: generated code differs between two builds of the same program:\n%s\n---\n%s", x.name, x.a, x.b)
		}
		path := filepath.Join("testdata", "cuda", x.name+".cu")
		if *update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(x.a), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./flex -run CUDAGolden -update to create)", err)
		}
		if string(want) != x.a {
			t.Errorf("%s: generated code differs from %s (rerun with -update if intended):\n%s", x.name, path, x.a)
		}
	}
}

// TestCUDACompilesAndAgrees compiles the generated code of library and
// random programs as C++ with g++ (CUDA qualifiers defined away), runs it
// on random points and compares with the CPU evaluation: exact for masks,
// float32 tolerance for scores and their derivatives. It skips when no g++
// is installed.
func TestCUDACompilesAndAgrees(t *testing.T) {
	gxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("g++ not found: the generated CUDA C is checked by compiling it as C++")
	}
	r := newRand(t)
	d := Dims{Batch: 2, HeadsQ: 4, HeadsKV: 2, LenQ: 40, LenKV: 70, HeadDim: 4}
	a := gxxArgs(r, d)
	masks, scores := libraryPrograms()
	for i := 0; i < 12; i++ {
		masks = append(masks, NewMask(fmt.Sprintf("rand%d", i), randIntOnlyBool(r, 4)))
	}
	scores = append(scores, randScore(r, d, a), NewScore("rand", Score().Mul(pF1.At(H()).Abs().Add(F(0.5))).
		Add(pF2.At(H(), Q().Sub(KV()).Abs()).Tanh()).Add(SelectF(Q().Lt(KV()), F(-0.7), pF1.At(KV())))))
	if scores[len(scores)-2] == nil {
		scores = scores[:len(scores)-2]
		scores = append(scores, Softcap(2))
	}
	scores = append(scores, cudaOpPrograms()...)

	// Points to evaluate: (b, h, q, kv, score).
	type point struct {
		b, h, q, kv int
		s           float64
	}
	var pts []point
	for i := 0; i < 300; i++ {
		pts = append(pts, point{r.IntN(2), r.IntN(4), r.IntN(40), r.IntN(70), r.NormFloat64() * 3})
	}

	var src bytes.Buffer
	src.WriteString(gxxPrelude)
	writeGxxParams(&src, a)
	var pb, ph, pq, pkv []int32
	var ps []float64
	for _, p := range pts {
		pb, ph, pq, pkv = append(pb, int32(p.b)), append(ph, int32(p.h)), append(pq, int32(p.q)), append(pkv, int32(p.kv))
		ps = append(ps, p.s)
	}
	fmt.Fprintf(&src, "static int PB[] = {%s};\nstatic int PH[] = {%s};\nstatic int PQ[] = {%s};\nstatic int PKV[] = {%s};\nstatic float PS[] = {%s};\n",
		joinInts(pb), joinInts(ph), joinInts(pq), joinInts(pkv), joinFloats(ps))
	var main strings.Builder
	main.WriteString("int main() {\n")
	loop := fmt.Sprintf("  for (int i = 0; i < %d; i++) ", len(pts))
	for i, m := range masks {
		src.WriteString(m.CUDA(fmt.Sprintf("mask%d", i)))
		fmt.Fprintf(&main, "%sprintf(\"%%d\\n\", (int)mask%d(PB[i], PH[i], PQ[i], PKV[i]%s));\n", loop, i, gxxCallArgs(a, m.plan, false))
	}
	for i, s := range scores {
		src.WriteString(s.CUDA(fmt.Sprintf("score%d", i)))
		src.WriteString(s.CUDABackward(fmt.Sprintf("score%d_bwd", i)))
		fmt.Fprintf(&main, "%sprintf(\"%%.9g %%.9g\\n\", score%d(PS[i], PB[i], PH[i], PQ[i], PKV[i]%s), score%d_bwd(PS[i], 1.0f, PB[i], PH[i], PQ[i], PKV[i]%s));\n",
			loop, i, gxxCallArgs(a, s.plan, false), i, gxxCallArgs(a, s.plan, true))
	}
	main.WriteString("  return 0;\n}\n")
	src.WriteString(main.String())

	outp := gxxRun(t, gxx, src.String())
	lines := strings.Fields(string(outp))
	next := func() string {
		v := lines[0]
		lines = lines[1:]
		return v
	}
	for _, m := range masks {
		for _, p := range pts {
			got := next() == "1"
			if want := refMask(m, a, p.b, p.h, p.q, p.kv); got != want {
				t.Fatalf("%v at %+v: CUDA C %v, CPU %v", m, p, got, want)
			}
		}
	}
	for _, s := range scores {
		for _, p := range pts {
			got, _ := strconv.ParseFloat(next(), 64)
			want := refScore(s, a, p.b, p.h, p.q, p.kv, float64(float32(p.s)))
			if math.Abs(got-want) > 1e-4*(1+math.Abs(want)) {
				t.Fatalf("%v at %+v: CUDA C %v, CPU %v", s, p, got, want)
			}
			got, _ = strconv.ParseFloat(next(), 64)
			x := float64(float32(p.s))
			h := 1e-6 * math.Max(1, math.Abs(x))
			want = (refScore(s, a, p.b, p.h, p.q, p.kv, x+h) - refScore(s, a, p.b, p.h, p.q, p.kv, x-h)) / (2 * h)
			if math.Abs(got-want) > 1e-3*(1+math.Abs(want)) {
				t.Fatalf("%v at %+v: CUDA C derivative %v, finite difference %v", s, p, got, want)
			}
		}
	}
}

// gxxArgs returns the Args of TestCUDACompilesAndAgrees: random ones and
// those of every library program.
func gxxArgs(r *rand.Rand, d Dims) *Args {
	a := randArgs(r, d)
	pl := []int32{5, 33}
	a.SetIntTensor(PrefixLen, pl, 2)
	ids := make([]int32, 2*70)
	for i := range ids {
		ids[i] = int32(i % 70 / 9)
	}
	a.SetIntTensor(DocIDs, ids, 2, 70)
	anchors := make([]int32, 2*3)
	for i := range anchors {
		anchors[i] = int32(r.IntN(22))
	}
	a.SetInt(DFlashCtxLen, 22).SetIntTensor(DFlashAnchors, anchors, 2, 3).
		SetIntTensor(DFlashStarts, []int32{0, 4, 9, 0, 0, 13}, 2, 3).SetIntTensor(DFlashNumValid, []int32{3, 2}, 2)
	a.SetFloat(SoftcapName, 4.5).SetFloatTensor(ALiBiSlopesName, ALiBiSlopes(4), 4)
	rb := make([]float64, 4*17)
	for i := range rb {
		rb[i] = r.NormFloat64()
	}
	a.SetFloatTensor(RelBiasName, rb, 4, 17)
	return a
}

// writeGxxParams writes a's parameters as C globals P_<name> (and G_<name>,
// the gradient of each float tensor).
func writeGxxParams(src *bytes.Buffer, a *Args) {
	// Parameters as globals, named as the programs name them.
	for _, n := range slices.Sorted(maps.Keys(a.Ints)) {
		fmt.Fprintf(src, "static int P_%s = %d;\n", n, a.Ints[n])
	}
	for _, n := range slices.Sorted(maps.Keys(a.Floats)) {
		fmt.Fprintf(src, "static float P_%s = %s;\n", n, cudaFloat(a.Floats[n]))
	}
	for _, n := range slices.Sorted(maps.Keys(a.IntTensors)) {
		tn := a.IntTensors[n]
		fmt.Fprintf(src, "static int P_%s[] = {%s};\n", n, joinInts(tn.Data))
	}
	for _, n := range slices.Sorted(maps.Keys(a.FloatTensors)) {
		tn := a.FloatTensors[n]
		fmt.Fprintf(src, "static float P_%s[] = {%s};\nstatic float G_%s[%d];\n", n, joinFloats(tn.Data), n, len(tn.Data))
	}
}

// gxxCallArgs returns the parameter arguments of a call of p's printed
// function (", P_x, dims..." and, with grads, ", G_t" per float tensor).
func gxxCallArgs(a *Args, p *plan, grads bool) string {
	var sb strings.Builder
	for _, prm := range p.params {
		sb.WriteString(", P_" + prm.Name)
		if prm.Kind == ParamIntTensor || prm.Kind == ParamFloatTensor {
			var shape []int
			if prm.Kind == ParamIntTensor {
				shape = a.IntTensors[prm.Name].Shape
			} else {
				shape = a.FloatTensors[prm.Name].Shape
			}
			for _, s := range shape {
				fmt.Fprintf(&sb, ", %d", s)
			}
		}
	}
	if grads {
		for _, prm := range p.params {
			if prm.Kind == ParamFloatTensor {
				sb.WriteString(", G_" + prm.Name)
			}
		}
	}
	return sb.String()
}

// randIntOnlyBool is randBool without float comparisons (exact on both sides).
func randIntOnlyBool(r *rand.Rand, depth int) Bool {
	for {
		if b := randBool(r, depth); !readsFloat(b.n) {
			return b
		}
	}
}

func readsFloat(n *node) bool {
	if n.kind == kFloat {
		return true
	}
	for _, a := range n.args {
		if readsFloat(a) {
			return true
		}
	}
	return false
}

func joinInts(x []int32) string {
	s := make([]string, len(x))
	for i, v := range x {
		s[i] = strconv.Itoa(int(v))
	}
	return strings.Join(s, ", ")
}

func joinFloats(x []float64) string {
	s := make([]string, len(x))
	for i, v := range x {
		s[i] = cudaFloat(v)
	}
	return strings.Join(s, ", ")
}

// gxxPrelude makes generated CUDA C compile as C++: qualifiers defined
// away, single-threaded atomics.
const gxxPrelude = "#include <cmath>\n#include <cstdio>\n#include <algorithm>\nusing std::min; using std::max;\n" +
	"#define __device__\n#define __forceinline__ inline\n#define __restrict__\n" +
	"static inline float atomicAdd(float* p, float v) { float o = *p; *p += v; return o; }\n" +
	"static inline unsigned long long atomicCAS(unsigned long long* p, unsigned long long c, unsigned long long v) { unsigned long long o = *p; if (o == c) *p = v; return o; }\n"

// gxxRun compiles src with g++ (warnings are errors) and returns what the
// program prints.
func gxxRun(t *testing.T, gxx, src string) []byte {
	t.Helper()
	dir := t.TempDir()
	cpp := filepath.Join(dir, "gen.cpp")
	if err := os.WriteFile(cpp, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "gen")
	if outp, err := exec.Command(gxx, "-O1", "-std=c++17", "-Wall", "-Werror", "-Wno-unused-variable", "-Wno-tautological-compare", "-o", bin, cpp).CombinedOutput(); err != nil {
		t.Fatalf("generated code does not compile: %v\n%s", err, outp)
	}
	outp, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	return outp
}

package gpu

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"dflash/internal/atomicfile"
	"dflash/internal/parsefile"
)

// GemmTuneFile is the file, in the directory given to SetGemmTuning, that
// holds the tuned GEMM algorithms:
//
//	{"format": 1, "choices": {KEY: {"algo": [8 words], "index": I, "us": [...]}}}
//
// KEY names the GPU, the cuBLASLt version, the workspace bytes, whether
// GEMMs are deterministic and the normalized spec (gemmTuner.key); algo is
// the chosen cublasLtMatmulAlgo_t, index its place in the heuristic's list
// and us every candidate's time in µs (-1: it did not run). A choice is
// used only when this process's heuristic offers the same algorithm, so a
// stale or foreign entry costs a new timing, never a wrong product. A file
// that does not parse is ignored with a warning and replaced at the next
// save. Saves merge into what is on disk and replace the file atomically;
// two processes saving at once may lose one's new entry (timed again by
// the next run).
const GemmTuneFile = "gemm-algos.json"

// gemmTuneFormat is the version of GemmTuneFile's layout.
const gemmTuneFormat = 1

// GemmTuneStats says what SetGemmTuning has done on a device.
type GemmTuneStats struct {
	Timed   int     // plans whose candidates were timed
	Loaded  int     // plans that took their choice from the file
	Changed int     // timed plans that left the heuristic's first
	Untuned int     // plans left at the heuristic's first untimed: too small (gemmTuneMin), or maxTunedSizes sizes of their structure chosen
	Seconds float64 // wall time of the timings
}

// maxTunedSizes is how many sizes of one GEMM structure (a spec but for its
// dimensions, leading dimensions and strides) a device times. A run of
// fixed shapes (packed rows, a few length buckets, evaluation) has a few
// sizes of each; one whose sizes change every step (exact-length batches)
// would time every new size, 0.1-0.4 s each, for gains of a few percent,
// so from the next size on its products keep the heuristic's first.
const maxTunedSizes = 8

// gemmChoice is one tuned product.
type gemmChoice struct {
	Algo   [8]uint64 `json:"algo"`
	Index  int       `json:"index"`
	Micros []float64 `json:"us"`
}

type gemmTuneDoc struct {
	Format  int                   `json:"format"`
	Choices map[string]gemmChoice `json:"choices"`
}

// gemmTuner holds a device's tuned choices and the file they persist in.
type gemmTuner struct {
	dir      string // newGemmTuner's
	path     string // "": memory only
	gpu      string
	cublasLt int
	choices  map[string]gemmChoice
	sizes    map[string]int // sizes chosen (timed or stored) per structure (structKey)
	stats    GemmTuneStats
}

// gemmTuneMu serialises the read-merge-write of GemmTuneFile between the
// devices of a process.
var gemmTuneMu sync.Mutex

// newGemmTuner returns the tuner of a GPU named gpu with the cuBLASLt
// version given, holding the choices of dir's file ("": none, memory only).
func newGemmTuner(dir, gpu string, cublasLt int) *gemmTuner {
	t := &gemmTuner{dir: dir, gpu: gpu, cublasLt: cublasLt, choices: map[string]gemmChoice{}, sizes: map[string]int{}}
	if dir == "" {
		return t
	}
	t.path = filepath.Join(dir, GemmTuneFile)
	gemmTuneMu.Lock()
	defer gemmTuneMu.Unlock()
	choices, err := readGemmChoices(t.path)
	if err != nil {
		slog.Warn("gpu: ignoring the GEMM tuning file; products are timed again", "err", err)
		return t
	}
	t.choices = choices
	return t
}

// key returns the file's key of a normalized spec planned with a workspace
// of ws bytes, deterministic or not.
func (t *gemmTuner) key(ws uint64, det bool, s GemmSpec) string {
	tr := func(b bool) string {
		if b {
			return "T"
		}
		return "N"
	}
	k := fmt.Sprintf("%s|cublasLt %d|workspace %d|deterministic %v|%s%s %dx%dx%d ld %d,%d,%d batch %d stride %d,%d,%d %v->%v tf32 %v",
		t.gpu, t.cublasLt, ws, det, tr(s.TransA), tr(s.TransB), s.M, s.N, s.K, s.LDA, s.LDB, s.LDC,
		s.Batch, s.StrideA, s.StrideB, s.StrideC, s.In, s.Out, s.TF32)
	if s.Scale != ScaleNone { // FP8; the keys of other products stay as they were
		k += " scale " + s.Scale.String()
		if s.FastAccum {
			k += " fast-accum"
		}
	}
	return k
}

// structKey returns the part of key's spec that does not change with the
// sizes of a product: what maxTunedSizes counts sizes of.
func (t *gemmTuner) structKey(ws uint64, det bool, s GemmSpec) string {
	s.M, s.N, s.K, s.LDA, s.LDB, s.LDC, s.StrideA, s.StrideB, s.StrideC = 0, 0, 0, 0, 0, 0, 0, 0, 0
	return t.key(ws, det, s)
}

// choose returns the index in algos (the heuristic's candidates, best
// first) of the algorithm to use for key, whose structure is skey: the
// stored choice when algos hold it, else, while fewer than maxTunedSizes
// sizes of skey have been chosen (timed or stored), the one pickGemm picks from timeAll's
// times, which is then stored and saved, else 0. A failed save is logged, not returned: the choice
// still holds for this process.
func (t *gemmTuner) choose(key, skey string, algos [][8]uint64, timeAll func() ([]float64, error)) (int, error) {
	if c, ok := t.choices[key]; ok {
		if i := slices.Index(algos, c.Algo); i >= 0 {
			t.stats.Loaded++
			t.sizes[skey]++ // as when it was timed: a later process caps at the same sizes
			return i, nil
		}
		slog.Warn("gpu: the stored GEMM algorithm is not among cuBLASLt's candidates; timing again", "key", key)
	}
	if t.sizes[skey] >= maxTunedSizes {
		if t.sizes[skey] == maxTunedSizes {
			slog.Info("gpu: GEMM sizes vary: products of this structure keep cuBLASLt's first choice from now on",
				"structure", skey, "sizes_timed", maxTunedSizes)
			t.sizes[skey]++
		}
		t.stats.Untuned++
		return 0, nil
	}
	t.sizes[skey]++
	t0 := time.Now()
	times, err := timeAll()
	if err != nil {
		return 0, err
	}
	if len(times) != len(algos) {
		panic(fmt.Sprintf("gpu: %d times for %d GEMM candidates", len(times), len(algos)))
	}
	t.stats.Seconds += time.Since(t0).Seconds()
	t.stats.Timed++
	best, ok := pickGemm(times)
	if !ok {
		return 0, errors.New("no cuBLASLt candidate ran")
	}
	if best != 0 {
		t.stats.Changed++
		slog.Info("gpu: GEMM tuned away from the heuristic's first", "key", key, "candidate", best, "of", len(times),
			"speedup", fmt.Sprintf("%.1f%%", 100*(times[0]/times[best]-1)))
	}
	c := gemmChoice{Algo: algos[best], Index: best, Micros: make([]float64, len(times))}
	for i, s := range times {
		c.Micros[i] = -1
		if !math.IsInf(s, 1) {
			c.Micros[i] = math.Round(s*1e7) / 10 // µs to 0.1
		}
	}
	t.choices[key] = c
	if err := t.save(key, c); err != nil {
		slog.Warn("gpu: could not save the GEMM tuning file", "err", err)
	}
	return best, nil
}

// save adds key's choice to the file, keeping what others wrote there.
func (t *gemmTuner) save(key string, c gemmChoice) error {
	if t.path == "" {
		return nil
	}
	gemmTuneMu.Lock()
	defer gemmTuneMu.Unlock()
	choices, err := readGemmChoices(t.path)
	if err != nil { // warned about when read: replaced now
		choices = map[string]gemmChoice{}
	}
	choices[key] = c
	data, err := json.MarshalIndent(gemmTuneDoc{Format: gemmTuneFormat, Choices: choices}, "", "\t")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(t.path), 0o755); err != nil {
		return err
	}
	return atomicfile.Options{BestEffortDirSync: true}.WriteFile(t.path, append(data, '\n'))
}

// readGemmChoices reads GemmTuneFile at path: no choices when it is
// missing, an error naming the file when it is not a valid one (anything
// but a regular file is refused before opening: a FIFO would block).
func readGemmChoices(path string) (map[string]gemmChoice, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]gemmChoice{}, nil
	}
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%v)", path, fi.Mode().Type())
	}
	return parsefile.Read(path, decodeGemmChoices)
}

// decodeGemmChoices parses and checks GemmTuneFile's content.
func decodeGemmChoices(data []byte) (map[string]gemmChoice, error) {
	var doc gemmTuneDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if doc.Format != gemmTuneFormat {
		return nil, fmt.Errorf("format %d, this build reads %d", doc.Format, gemmTuneFormat)
	}
	for k, c := range doc.Choices {
		if c.Index < 0 || c.Index >= len(c.Micros) || c.Micros[c.Index] < 0 {
			return nil, fmt.Errorf("choice %q: index %d of %d timed candidates", k, c.Index, len(c.Micros))
		}
	}
	if doc.Choices == nil {
		doc.Choices = map[string]gemmChoice{}
	}
	return doc.Choices, nil
}

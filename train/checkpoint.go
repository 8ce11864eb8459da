package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"dflash/internal/atomicfile"
	"dflash/safetensors"
)

// File names inside a checkpoint directory and the output directory.
const (
	ConfigFile       = "config.json"
	ModelFile        = "model.safetensors"
	TrainerStateFile = "trainer_state.json"
	LatestFile       = "latest"
	checkpointPrefix = "checkpoint-"
	tmpPrefix        = ".tmp-ckpt-"
)

// ErrNoCheckpoint is returned by LoadLatest when the directory holds no valid checkpoint.
var ErrNoCheckpoint = errors.New("no checkpoint")

// TrainerState is the trainer's part of a checkpoint (trainer_state.json).
type TrainerState struct {
	Step         int                `json:"step"` // optimizer steps completed
	Tokens       int64              `json:"tokens"`
	Seed         uint64             `json:"seed"`
	RNG          []byte             `json:"rng"`                     // rngstream.Train state (RNG.MarshalBinary)
	DataPosition json.RawMessage    `json:"data_position,omitempty"` // from Hooks.DataState, opaque
	Schedule     Schedule           `json:"schedule"`
	LR           float64            `json:"lr"` // learning rate of the last step taken
	Best         map[string]float64 `json:"best,omitempty"`
	BestStep     map[string]int     `json:"best_step,omitempty"`
	ElapsedSec   float64            `json:"elapsed_sec"`
	// Identity is Hooks.Identity of the run that wrote the checkpoint.
	Identity map[string]string `json:"identity,omitempty"`
	// Files records the size and CRC-32C of every other file of the checkpoint; it is
	// filled in by SaveCheckpoint and checked by LoadLatest.
	Files map[string]FileSum `json:"files"`
}

// FileSum is a file's size and CRC-32C (Castagnoli).
type FileSum struct {
	Size   int64  `json:"size"`
	CRC32C uint32 `json:"crc32c"`
}

// Checkpoint is what SaveCheckpoint writes.
type Checkpoint struct {
	Config []byte  // config.json, verbatim ("{}" when nil)
	Params *Params // values to model.safetensors in F32, moments and step count to the optimizer files
	State  TrainerState
}

// checkpointHook, when set (tests only), is called between the stages of a
// save; an error it returns fails the save at that stage.
var checkpointHook func(stage string) error

func hook(stage string) error {
	if checkpointHook != nil {
		return checkpointHook(stage)
	}
	return nil
}

// CheckpointName returns the directory name of the checkpoint after step steps.
func CheckpointName(step int) string { return checkpointPrefix + strconv.Itoa(step) }

// SaveCheckpoint writes c as outDir/checkpoint-<c.State.Step>, atomically: every file
// goes into a fresh outDir/.tmp-ckpt-* directory and is synced, the directory is synced
// and renamed into place, outDir is synced, and then outDir/latest is replaced (temp
// file + rename) by the new name. Afterwards only the newest keep checkpoints remain
// (keep <= 0 keeps all). It returns the checkpoint's path. The parameters are read
// from c.Params into host memory first (Run instead reads them into memory kept for
// the run and writes the files in the background: ckptwrite.go).
func SaveCheckpoint(outDir string, c *Checkpoint, keep int) (string, error) {
	w, err := writeCheckpoint(outDir, c.Config, c.Params.hostSnapshot(), c.State, keep)
	return w.dir, err
}

// written is what writeCheckpoint did.
type written struct {
	dir   string // the checkpoint's path
	bytes int64  // the size of its files
}

// writeCheckpoint writes the checkpoint of model config cfg ("{}" when nil),
// parameters s and trainer state st as SaveCheckpoint says. It reads only
// its arguments, so that it can run beside the training that produced them.
func writeCheckpoint(outDir string, cfg []byte, s *paramSnapshot, st TrainerState, keep int) (written, error) {
	var w written
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return w, err
	}
	tmp, err := os.MkdirTemp(outDir, tmpPrefix)
	if err != nil {
		return w, err
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return w, err
	}
	if cfg == nil {
		cfg = []byte("{}")
	}
	if err := atomicfile.WriteFile(filepath.Join(tmp, ConfigFile), cfg); err != nil {
		return w, err
	}
	if err := hook("config"); err != nil {
		return w, err
	}
	// The two large files at once (writeSummed: direct writes in blocks):
	// two streams keep more of the disk's queue busy than one, and each
	// file's filling of its next block overlaps the other's writes.
	var modelSum, optSum FileSum
	var modelErr, optErr error
	var wg sync.WaitGroup
	wg.Go(func() { modelSum, modelErr = s.saveValues(filepath.Join(tmp, ModelFile)) })
	wg.Go(func() { optSum, optErr = s.saveOptimizer(tmp) })
	wg.Wait()
	if err := errors.Join(modelErr, optErr); err != nil {
		return w, err
	}
	if err := hook("model"); err != nil {
		return w, err
	}
	if err := hook("optimizer"); err != nil {
		return w, err
	}
	st.Files = map[string]FileSum{ModelFile: modelSum, OptimizerTensorsFile: optSum}
	ents, err := os.ReadDir(tmp)
	if err != nil {
		return w, err
	}
	for _, e := range ents {
		sum, ok := st.Files[e.Name()]
		if !ok { // the small files: read back
			if sum, err = fileSum(filepath.Join(tmp, e.Name())); err != nil {
				return w, err
			}
			st.Files[e.Name()] = sum
		}
		w.bytes += sum.Size
	}
	b, err := json.MarshalIndent(st, "", " ")
	if err != nil {
		return w, err
	}
	// Written last, this file's directory sync also makes every other file's entry durable.
	if err := atomicfile.WriteFile(filepath.Join(tmp, TrainerStateFile), b); err != nil {
		return w, err
	}
	w.bytes += int64(len(b))
	if err := hook("synced"); err != nil {
		return w, err
	}
	name := CheckpointName(st.Step)
	final := filepath.Join(outDir, name)
	if _, err := os.Stat(final); err == nil {
		// Re-saving a step (after a resume): move the old one aside first.
		if err := discard(outDir, final); err != nil {
			return w, err
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		return w, err
	}
	done = true
	if err := atomicfile.SyncDir(outDir); err != nil {
		return w, err
	}
	w.dir = final
	if err := hook("renamed"); err != nil {
		return w, err
	}
	if err := atomicfile.WriteFile(filepath.Join(outDir, LatestFile), []byte(name+"\n")); err != nil {
		return w, err
	}
	if err := hook("latest"); err != nil {
		return w, err
	}
	if keep > 0 {
		if err := prune(outDir, keep, st.Step); err != nil {
			return w, err
		}
	}
	return w, nil
}

// discard renames dir to a temporary name (so no checkpoint-* is ever half deleted)
// and removes it.
func discard(outDir, dir string) error {
	trash, err := os.MkdirTemp(outDir, tmpPrefix+"del-")
	if err != nil {
		return err
	}
	if err := os.Rename(dir, filepath.Join(trash, "x")); err != nil {
		os.Remove(trash)
		return err
	}
	return os.RemoveAll(trash)
}

// prune removes all but the newest keep checkpoints, never the one of step current.
func prune(outDir string, keep, current int) error {
	steps, err := listCheckpoints(outDir)
	if err != nil {
		return err
	}
	for i, s := range steps {
		if i < keep || s == current {
			continue
		}
		if err := discard(outDir, filepath.Join(outDir, CheckpointName(s))); err != nil {
			return err
		}
	}
	return nil
}

// listCheckpoints returns the steps of outDir's checkpoint-<step> directories, newest first.
func listCheckpoints(outDir string) ([]int, error) {
	ents, err := os.ReadDir(outDir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var steps []int
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), checkpointPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		if s, err := strconv.Atoi(rest); err == nil && s >= 0 && CheckpointName(s) == e.Name() {
			steps = append(steps, s)
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(steps)))
	return steps, nil
}

// Loaded is a validated checkpoint found by LoadLatest.
type Loaded struct {
	Dir    string
	State  TrainerState
	Config []byte
	// Skipped lists newer checkpoint directories that failed validation, with why.
	Skipped []string
}

// LoadLatest removes leftovers of interrupted saves (.tmp-ckpt-* directories and
// temporary files) from outDir, then returns the valid checkpoint with the highest
// step. A checkpoint is valid when trainer_state.json parses, its step matches the
// directory name, every file it lists has the recorded size and CRC-32C, and the
// safetensors headers validate. It returns an error wrapping ErrNoCheckpoint when
// there is none. Only one process may use outDir at a time.
func LoadLatest(outDir string) (*Loaded, error) {
	if err := cleanTemps(outDir); err != nil {
		return nil, err
	}
	steps, err := listCheckpoints(outDir)
	if err != nil {
		return nil, err
	}
	var skipped []string
	for _, s := range steps {
		dir := filepath.Join(outDir, CheckpointName(s))
		l, err := validate(dir, s)
		if err != nil {
			skipped = append(skipped, err.Error())
			continue
		}
		l.Skipped = skipped
		return l, nil
	}
	if len(skipped) > 0 {
		ce := &CorruptError{Out: outDir, Why: skipped}
		for _, s := range steps {
			ce.Dirs = append(ce.Dirs, filepath.Join(outDir, CheckpointName(s)))
		}
		return nil, ce
	}
	return nil, fmt.Errorf("%s: %w", outDir, ErrNoCheckpoint)
}

// CorruptError is LoadLatest's error when the output directory holds checkpoints
// but none is valid. It wraps ErrNoCheckpoint.
type CorruptError struct {
	Out  string
	Dirs []string // the checkpoint directories, newest first
	Why  []string // why each failed validation, in the same order
}

func (e *CorruptError) Error() string {
	is, it := "is", "it"
	if len(e.Dirs) > 1 {
		is, it = "are", "them"
	}
	return fmt.Sprintf("%s holds no valid checkpoint: %s %s corrupt (%s); nothing can resume from %s: remove %s (rm -r %s) to start a fresh run in %s, or choose another --out",
		e.Out, strings.Join(e.names(), ", "), is, strings.Join(e.Why, "; "), it, it, strings.Join(e.Dirs, " "), e.Out)
}

func (e *CorruptError) Unwrap() error { return ErrNoCheckpoint }

func (e *CorruptError) names() []string {
	n := make([]string, len(e.Dirs))
	for i, d := range e.Dirs {
		n[i] = filepath.Base(d)
	}
	return n
}

func cleanTemps(outDir string) error {
	ents, err := os.ReadDir(outDir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tmpPrefix) || strings.HasPrefix(e.Name(), atomicfile.TempPrefix(LatestFile)) {
			if err := os.RemoveAll(filepath.Join(outDir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

func validate(dir string, step int) (*Loaded, error) {
	statePath := filepath.Join(dir, TrainerStateFile)
	raw, err := os.ReadFile(statePath)
	if err != nil {
		return nil, err
	}
	var st TrainerState
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", statePath, err)
	}
	if st.Step != step {
		return nil, fmt.Errorf("%s: step %d does not match the directory name", statePath, st.Step)
	}
	for _, must := range []string{ConfigFile, ModelFile} {
		if _, ok := st.Files[must]; !ok {
			return nil, fmt.Errorf("%s: lists no %s", statePath, must)
		}
	}
	for name, want := range st.Files {
		if !filepath.IsLocal(name) {
			return nil, fmt.Errorf("%s: file name %q", statePath, name)
		}
		got, err := fileSum(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		if got != want {
			return nil, fmt.Errorf("%s: size %d crc32c %08x, trainer_state.json recorded %d %08x", filepath.Join(dir, name), got.Size, got.CRC32C, want.Size, want.CRC32C)
		}
		if strings.HasSuffix(name, ".safetensors") {
			f, err := safetensors.Open(filepath.Join(dir, name))
			if err != nil {
				return nil, err
			}
			f.Close()
		}
	}
	cfg, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	if err != nil {
		return nil, err
	}
	return &Loaded{Dir: dir, State: st, Config: cfg}, nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func fileSum(path string) (FileSum, error) {
	f, err := os.Open(path)
	if err != nil {
		return FileSum{}, err
	}
	defer f.Close()
	h := crc32.New(castagnoli)
	n, err := io.Copy(h, f)
	if err != nil {
		return FileSum{}, fmt.Errorf("%s: %w", path, err)
	}
	return FileSum{Size: n, CRC32C: h.Sum32()}, nil
}

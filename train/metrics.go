package train

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"os"
	"sort"
	"strconv"
	"time"

	"dflash/internal/atomicfile"
	"dflash/internal/tfevents"
)

// MetricsFile is the name of the metrics log in the output directory.
const MetricsFile = "metrics.jsonl"

// Record is one line of metrics.jsonl: Kind is "train" or "eval", Step the number of
// optimizer steps completed, Values the numbers (loss, lr, grad_norm, acc, tau, ...).
type Record struct {
	Kind   string
	Step   int
	Time   float64 // seconds since the run (or resumed run) started
	Values map[string]float64
}

// MarshalJSON writes {"kind":..,"step":..,"time":.., <values>} with keys in order;
// non-finite values are written as null.
func (r Record) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"kind":`)
	k, _ := json.Marshal(r.Kind)
	b.Write(k)
	b.WriteString(`,"step":` + strconv.Itoa(r.Step))
	b.WriteString(`,"time":` + strconv.FormatFloat(r.Time, 'f', 3, 64))
	keys := make([]string, 0, len(r.Values))
	for key := range r.Values {
		if key != "kind" && key != "step" && key != "time" {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	for _, key := range keys {
		kb, _ := json.Marshal(key)
		b.WriteByte(',')
		b.Write(kb)
		b.WriteByte(':')
		v := r.Values[key]
		if math.IsNaN(v) || math.IsInf(v, 0) {
			b.WriteString("null")
		} else {
			b.WriteString(strconv.FormatFloat(v, 'g', -1, 64))
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads a line written by MarshalJSON (null values are skipped).
func (r *Record) UnmarshalJSON(data []byte) error {
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	kind, _ := m["kind"].(string)
	step, ok := m["step"].(float64)
	if kind == "" || !ok {
		return errors.New("metrics record without kind or step")
	}
	r.Kind, r.Step = kind, int(step)
	r.Time, _ = m["time"].(float64)
	r.Values = map[string]float64{}
	for k, v := range m {
		if f, ok := v.(float64); ok && k != "step" && k != "time" {
			r.Values[k] = f
		}
	}
	return nil
}

// metricsLog appends records to metrics.jsonl, one write per line (no buffering, so a
// killed process loses at most the line being written), and with tb to a TensorBoard
// event file, one record per event. Without a file (a rank other than 0) it writes
// nothing.
type metricsLog struct {
	f  *os.File
	tb *tfevents.Writer
}

func openMetrics(path string, write bool) (*metricsLog, error) {
	if !write {
		return &metricsLog{}, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &metricsLog{f: f}, nil
}

func (l *metricsLog) write(r Record) error {
	if l.f == nil {
		return nil
	}
	b, _ := r.MarshalJSON()
	if _, err := l.f.Write(append(b, '\n')); err != nil {
		return err
	}
	if l.tb != nil {
		return l.tb.Scalars(int64(r.Step), time.Now(), eventScalars(r))
	}
	return nil
}

func (l *metricsLog) close() error {
	var errs []error
	if l.tb != nil {
		errs = append(errs, l.tb.Close())
	}
	if l.f != nil {
		errs = append(errs, l.f.Close())
	}
	return errors.Join(errs...)
}

// ReadMetrics reads metrics.jsonl; a line that does not parse (a torn last line of a
// killed run) is skipped.
func ReadMetrics(path string) ([]Record, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Record
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err == nil {
			out = append(out, r)
		}
	}
	return out, sc.Err()
}

// truncateMetrics rewrites path (atomically) keeping only well-formed records of steps
// <= step: a resumed run then logs the steps after its checkpoint once.
func truncateMetrics(path string, step int) error {
	recs, err := ReadMetrics(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var b bytes.Buffer
	for _, r := range recs {
		if r.Step <= step {
			line, _ := r.MarshalJSON()
			b.Write(line)
			b.WriteByte('\n')
		}
	}
	return atomicfile.WriteFile(path, b.Bytes())
}

package train

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"dflash/internal/tfevents"
)

// EventFiles is the glob of the TensorBoard event files in the output
// directory.
const EventFiles = "events.out." + tfevents.Marker + ".*"

// openEvents opens a new TensorBoard event file in dir, beside
// metrics.jsonl. A run resumed at step (its checkpoint's) starts the file
// with a SessionLog START at step+1, the first step it records: TensorBoard
// then drops the points of the earlier files at that step and later (those
// the killed run logged after its checkpoint), as truncateMetrics drops
// them from metrics.jsonl, and keeps those up to the checkpoint.
func openEvents(dir string, resumed bool, step int) (*tfevents.Writer, error) {
	now := time.Now()
	w, err := tfevents.Create(dir, now)
	if err != nil {
		return nil, err
	}
	if resumed {
		if err := w.Start(int64(step)+1, now); err != nil {
			w.Close()
			return nil, err
		}
	}
	return w, nil
}

// removeEvents deletes the event files of an earlier run in dir (a fresh
// run starts its curves anew, as it does metrics.jsonl).
func removeEvents(dir string) error {
	old, err := filepath.Glob(filepath.Join(dir, EventFiles))
	if err != nil {
		return err
	}
	for _, p := range old {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove the event file of an earlier run: %w", err)
		}
	}
	return nil
}

// eventScalars returns r's values under TensorBoard tags: <kind>/<name>.
func eventScalars(r Record) map[string]float64 {
	out := make(map[string]float64, len(r.Values))
	for k, v := range r.Values {
		out[r.Kind+"/"+k] = v
	}
	return out
}

package recipe

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"dflash/train"
)

// notWritten is the error of a training job that ends without writing
// its drafter to OUT/drafter because a file could not be written (err: the
// export itself, or a checkpoint or metrics write during training, as on a full
// disk): err, then that the drafter was not written and the newest valid
// checkpoint in out that --resume continues from, or that there is none.
// Other errors (a refused resume, a bad option) and nil are returned as they
// are.
func notWritten(err error, out string) error {
	var pe *fs.PathError
	var le *os.LinkError
	if err == nil || !errors.As(err, &pe) && !errors.As(err, &le) && !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EDQUOT) {
		return err
	}
	dir := filepath.Join(out, "drafter")
	l, lerr := train.LoadLatest(out)
	if lerr != nil {
		return fmt.Errorf("%w\nthe drafter was not written to %s, and %s holds no checkpoint to resume from (%v)", err, dir, out, lerr)
	}
	return fmt.Errorf("%w\nthe drafter was not written to %s; the last good checkpoint is %s (step %d): make room and run the same command with --resume, which exports the drafter when it ends",
		err, dir, l.Dir, l.State.Step)
}

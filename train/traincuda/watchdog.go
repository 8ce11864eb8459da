package traincuda

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"dflash/train"
)

// NCCL calls have no timeout: a collective that a rank never joins waits
// forever on the device. The watchdog here waits for a collective's
// completion event by polling it from the worker thread (no goroutine, no
// blocking synchronisation) against a deadline, and on expiry, on an NCCL
// error met in the background, or when another rank of the process stops,
// aborts the communicator.

// clock is the watchdog's time: the real one, or a fake in the tests.
type clock interface {
	now() time.Time
	sleep(d time.Duration)
}

type realClock struct{}

func (realClock) now() time.Time        { return time.Now() }
func (realClock) sleep(d time.Duration) { time.Sleep(d) }

// Poll intervals of the watchdog: it polls at once, then sleeps from
// pollMin doubling up to pollMax between polls (a bucket's all-reduce takes
// from tens of microseconds to milliseconds).
const (
	pollMin = 5 * time.Microsecond
	pollMax = time.Millisecond
)

// outcome is how a wait ended.
type outcome int

const (
	completed outcome = iota
	failed            // poll or the communicator returned an error
	stopped           // another rank of the process stopped
	expired           // the deadline passed
)

// await polls done until it reports completion, returns an error, stop is
// closed, or timeout has passed on clk since the call. asyncErr, when not
// nil, is asked at each poll for an error the communicator met in the
// background. The error returned is that of done or asyncErr (failed).
func await(done func() (bool, error), asyncErr func() error, stop <-chan struct{}, timeout time.Duration, clk clock) (outcome, error) {
	deadline := clk.now().Add(timeout)
	wait := pollMin
	for {
		ok, err := done()
		if err != nil {
			return failed, err
		}
		if ok {
			return completed, nil
		}
		if asyncErr != nil {
			if err := asyncErr(); err != nil {
				return failed, err
			}
		}
		select {
		case <-stop:
			return stopped, nil
		default:
		}
		if !clk.now().Before(deadline) {
			return expired, nil
		}
		clk.sleep(wait)
		wait = min(2*wait, pollMax)
	}
}

// Stop tells the NCCL collectives of the ranks of one process that one of
// them stopped (its training failed), so that the others abort their
// communicators at once instead of waiting out the timeout.
type Stop struct {
	once sync.Once
	ch   chan struct{}
	rank int
	why  error
}

// NewStop returns a Stop that has not fired.
func NewStop() *Stop { return &Stop{ch: make(chan struct{})} }

// Fail records that rank stopped for the reason why and wakes every
// collective waiting on s; only the first call counts.
func (s *Stop) Fail(rank int, why error) {
	if why == nil {
		why = errors.New("no reason given")
	}
	s.once.Do(func() {
		s.rank, s.why = rank, why
		close(s.ch)
	})
}

// done returns the channel closed by Fail (nil for a nil Stop: never).
func (s *Stop) done() <-chan struct{} {
	if s == nil {
		return nil
	}
	return s.ch
}

// LostError is the error of an NCCL collective that did not complete: the
// communicator was aborted and the group is unusable. It wraps
// train.ErrRankLost and, when known, the cause.
type LostError struct {
	Rank, Size int           // this rank and the group's
	Op         string        // the collective
	Seq        int           // its 1-based number among the group's collectives
	Timeout    time.Duration // the deadline that passed (expired)
	Peer       int           // the rank of this process that stopped, -1 when not known
	Cause      error         // NCCL's error, or the stopped rank's reason
}

func (e *LostError) Error() string {
	head := fmt.Sprintf("collective: rank %d of %d: %s #%d", e.Rank, e.Size, e.Op, e.Seq)
	switch {
	case e.Peer >= 0:
		return fmt.Sprintf("%s: rank %d stopped (%v); communicator aborted", head, e.Peer, e.Cause)
	case e.Cause != nil:
		return fmt.Sprintf("%s: %v; communicator aborted", head, e.Cause)
	default:
		return fmt.Sprintf("%s did not complete within %s: a rank stopped taking part (NCCL does not say which); communicator aborted",
			head, e.Timeout)
	}
}

func (e *LostError) Unwrap() []error {
	if e.Cause == nil {
		return []error{train.ErrRankLost}
	}
	return []error{train.ErrRankLost, e.Cause}
}

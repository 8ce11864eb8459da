package train

import (
	"fmt"
	"io"
	"strings"
	"time"

	"dflash/internal/termbar"
)

// progress draws the training progress on stderr: a bar redrawn in place on a
// terminal, plain lines otherwise.
type progress struct {
	w         io.Writer
	bar       bool // redraw in place
	off       bool
	every     int           // lines mode: a line every N steps (0: by time)
	interval  time.Duration // lines mode with every == 0; bar mode redraw limit
	total     int
	startStep int
	start     time.Time
	last      time.Time
	tokens    int64
	samples   int64
	lossSum   float64
	accSum    float64
	n, nAcc   int
}

func newProgress(w io.Writer, mode string, every, startStep, total int) *progress {
	p := &progress{w: w, every: every, total: total, startStep: startStep, start: time.Now(), interval: 5 * time.Second}
	switch mode {
	case "off":
		p.off = true
	case "bar":
		p.bar = true
	case "auto":
		p.bar = termbar.IsTerminal(w)
	}
	if p.bar {
		p.interval = 100 * time.Millisecond
	}
	return p
}

// update records a finished step (done = steps completed) of tokens and
// samples (0: not counted) and draws when due.
func (p *progress) update(done int, loss float64, acc float64, hasAcc bool, tokens, samples int) {
	if p.off {
		return
	}
	p.tokens += int64(tokens)
	p.samples += int64(samples)
	p.lossSum += loss
	p.n++
	if hasAcc {
		p.accSum += acc
		p.nAcc++
	}
	now := time.Now()
	final := done == p.total
	due := now.Sub(p.last) >= p.interval
	if !p.bar && p.every > 0 {
		due = done%p.every == 0
	}
	if !due && !final {
		return
	}
	p.last = now
	line := p.format(done, now)
	p.lossSum, p.accSum, p.n, p.nAcc = 0, 0, 0, 0
	if p.bar {
		fmt.Fprintf(p.w, "\r%s\x1b[K", line)
		if final {
			fmt.Fprintln(p.w)
		}
	} else {
		fmt.Fprintln(p.w, line)
	}
}

// note prints a message (an evaluation, a checkpoint) on its own line.
func (p *progress) note(msg string) {
	if p.off {
		return
	}
	if p.bar {
		fmt.Fprintf(p.w, "\r\x1b[K%s\n", msg)
		return
	}
	fmt.Fprintln(p.w, msg)
}

// finish ends an unfinished bar line.
func (p *progress) finish(done int) {
	if p.bar && !p.off && done != p.total {
		fmt.Fprintln(p.w)
	}
}

func (p *progress) format(done int, now time.Time) string {
	var b strings.Builder
	pct := float64(done) / float64(p.total)
	fmt.Fprintf(&b, "step %*d/%d", len(fmt.Sprint(p.total)), done, p.total)
	if p.bar {
		b.WriteString(" " + termbar.Bar(pct, 24))
	}
	fmt.Fprintf(&b, " %3.0f%%", 100*pct)
	if p.n > 0 {
		fmt.Fprintf(&b, " loss %.4f", p.lossSum/float64(p.n))
	}
	if p.nAcc > 0 {
		fmt.Fprintf(&b, " acc %.3f", p.accSum/float64(p.nAcc))
	}
	el := now.Sub(p.start).Seconds()
	if el > 0 {
		fmt.Fprintf(&b, " %.0f tok/s", float64(p.tokens)/el)
		if p.samples > 0 {
			fmt.Fprintf(&b, " %.2f samples/s", float64(p.samples)/el)
		}
	}
	if steps := done - p.startStep; steps > 0 && done < p.total {
		eta := time.Duration(el / float64(steps) * float64(p.total-done) * float64(time.Second))
		fmt.Fprintf(&b, " ETA %s", eta.Round(time.Second))
	}
	return b.String()
}

package train

import (
	"fmt"
	"io"
	"strings"
	"time"

	"dflash/internal/termbar"
)

// progress draws the training progress on stderr: a bar redrawn in place on a
// terminal, plain lines otherwise. Its rates are the current one, over the
// last rateSteps steps or rateSpan seconds (whichever is shorter, and at
// least the last step), and the average since the first step; both count
// the time between steps (evaluations, checkpoint stalls) too.
type progress struct {
	w         io.Writer
	bar       bool // redraw in place
	off       bool
	every     int           // lines mode: a line every N steps (0: by time)
	interval  time.Duration // lines mode with every == 0; bar mode redraw limit
	total     int
	startStep int
	first     time.Time   // when the first step began
	last      time.Time   // the last line drawn
	window    []ratePoint // the start of the window, then the ends of the steps in it
	tokens    int64       // since the first step
	samples   int64
	lossSum   float64
	accSum    float64
	n, nAcc   int
}

// The current rate's window.
const (
	rateSteps = 20
	rateSpan  = 30 * time.Second
)

// ratePoint is the count of tokens and samples at a time.
type ratePoint struct {
	t               time.Time
	tokens, samples int64
}

// stepLine is what a finished step shows.
type stepLine struct {
	loss, acc       float64
	hasAcc          bool
	tokens, samples int // samples 0: not counted
}

func newProgress(w io.Writer, mode string, every, startStep, total int) *progress {
	p := &progress{w: w, every: every, total: total, startStep: startStep, interval: 5 * time.Second}
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

// begin marks the start of the first step, from which the rates count.
func (p *progress) begin(t time.Time) {
	p.first = t
	p.window = []ratePoint{{t: t}}
}

// update records step done (steps completed), finished at now, and draws
// when due.
func (p *progress) update(done int, now time.Time, s stepLine) {
	if p.off {
		return
	}
	if p.window == nil {
		p.begin(now) // no begin: the rates count from the first step's end
	}
	p.tokens += int64(s.tokens)
	p.samples += int64(s.samples)
	p.window = append(p.window, ratePoint{now, p.tokens, p.samples})
	for len(p.window) > rateSteps+1 || len(p.window) > 2 && now.Sub(p.window[1].t) >= rateSpan {
		p.window = p.window[1:]
	}
	p.lossSum += s.loss
	p.n++
	if s.hasAcc {
		p.accSum += s.acc
		p.nAcc++
	}
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

// format returns the line of step done at now: the current rate and, in
// parentheses, the average since the first step.
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
	w0, w1 := p.window[0], p.window[len(p.window)-1]
	cur, el := w1.t.Sub(w0.t).Seconds(), now.Sub(p.first).Seconds()
	if cur > 0 && el > 0 {
		if p.samples > 0 {
			fmt.Fprintf(&b, " %.0f tok/s %.2f samples/s (avg %.2f)", float64(w1.tokens-w0.tokens)/cur, float64(w1.samples-w0.samples)/cur, float64(p.samples)/el)
		} else {
			fmt.Fprintf(&b, " %.0f tok/s (avg %.0f)", float64(w1.tokens-w0.tokens)/cur, float64(p.tokens)/el)
		}
	}
	if steps := done - p.startStep; steps > 0 && done < p.total {
		eta := time.Duration(el / float64(steps) * float64(p.total-done) * float64(time.Second))
		fmt.Fprintf(&b, " ETA %s", eta.Round(time.Second))
	}
	return b.String()
}

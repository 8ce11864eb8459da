package train

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"dflash/internal/atomicfile"
)

// PlotFile is the name of the plot in the output directory.
const PlotFile = "plot.png"

// series is one curve: a key of a kind of record.
type series struct {
	kind, key, label string
	color            color.Color
}

// PlotMetrics draws the records of metricsPath into a PNG at pngPath: the top panel
// shows training loss (and its moving average) and eval loss against the step, the
// next training and eval accuracy ("acc") and, when present, the acceptance
// length on its own panel: the simulated eval "tau" beside the real one of
// speculative decoding, "spec_tau" (--spec-eval-every). Series with no points
// are left out.
func PlotMetrics(metricsPath, pngPath string) error {
	recs, err := ReadMetrics(metricsPath)
	if err != nil {
		return err
	}
	blue, red, green, gray := color.RGBA{31, 119, 180, 255}, color.RGBA{214, 39, 40, 255}, color.RGBA{44, 160, 44, 255}, color.RGBA{170, 170, 170, 255}
	purple := color.RGBA{148, 103, 189, 255}
	panels := []struct {
		title, ylabel string
		series        []series
		smooth        bool
	}{
		{"loss", "loss", []series{{"train", "loss", "train", gray}, {"eval", "loss", "eval", red}}, true},
		{"accuracy", "accuracy", []series{{"train", "acc", "train", gray}, {"eval", "acc", "eval", red}}, true},
		{"acceptance length", "tau", []series{{"eval", "tau", "simulated (eval)", green}, {"eval", "spec_tau", "real (speculative decoding)", purple}}, false},
	}
	first, last := stepRange(recs)
	var plots [][]*plot.Plot
	for _, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text = "step"
		p.Y.Label.Text = pn.ylabel
		p.Add(plotter.NewGrid())
		p.Y.Tick.Marker = preciseTicks{}
		n := 0
		for _, s := range pn.series {
			xy := points(recs, s.kind, s.key)
			if len(xy) == 0 {
				continue
			}
			n++
			if s.kind == "eval" {
				// Evaluations are few (often one at the end): draw each as a
				// marker joined by a line, so a single one still shows.
				l, pts, err := plotter.NewLinePoints(xy)
				if err != nil {
					return fmt.Errorf("plot %s: %w", s.label, err)
				}
				l.Color, pts.Color, pts.Shape = s.color, s.color, draw.CircleGlyph{}
				p.Add(l, pts)
				p.Legend.Add(s.label, l, pts)
			} else {
				l, err := plotter.NewLine(xy)
				if err != nil {
					return fmt.Errorf("plot %s: %w", s.label, err)
				}
				l.Color = s.color
				p.Add(l)
				p.Legend.Add(s.label, l)
			}
			if pn.smooth && s.kind == "train" && len(xy) >= 10 {
				sm, _ := plotter.NewLine(movingAverage(xy, max(5, len(xy)/50)))
				sm.Color, sm.Width = blue, vg.Points(1.5)
				p.Add(sm)
				p.Legend.Add("train (moving avg)", sm)
			}
		}
		if n > 0 {
			p.X.Min, p.X.Max = min(p.X.Min, float64(first)), max(p.X.Max, float64(last))
			p.Legend.Top = true
			plots = append(plots, []*plot.Plot{p})
		}
	}
	if len(plots) == 0 {
		return fmt.Errorf("%s: nothing to plot", metricsPath)
	}
	const w, hPer = 8 * vg.Inch, 3 * vg.Inch
	img := vgimg.New(w, hPer*vg.Length(len(plots)))
	dc := draw.New(img)
	canvases := plot.Align(plots, draw.Tiles{Rows: len(plots), Cols: 1, PadX: vg.Millimeter, PadY: 2 * vg.Millimeter}, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	return atomicfile.Write(pngPath, func(w io.Writer) error {
		_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
		return err
	})
}

func points(recs []Record, kind, key string) plotter.XYs {
	var xy plotter.XYs
	for _, r := range recs {
		if v, ok := r.Values[key]; ok && r.Kind == kind && !math.IsNaN(v) && !math.IsInf(v, 0) {
			xy = append(xy, plotter.XY{X: float64(r.Step), Y: v})
		}
	}
	return xy
}

// movingAverage returns the trailing mean over window points.
func movingAverage(xy plotter.XYs, window int) plotter.XYs {
	out := make(plotter.XYs, len(xy))
	var sum float64
	for i, p := range xy {
		sum += p.Y
		if i >= window {
			sum -= xy[i-window].Y
		}
		out[i] = plotter.XY{X: p.X, Y: sum / float64(min(i+1, window))}
	}
	return out
}

// stepRange returns the smallest and largest step of recs, so that every
// panel spans the whole run even when a series covers only part of it.
func stepRange(recs []Record) (first, last int) {
	for i, r := range recs {
		if i == 0 || r.Step < first {
			first = r.Step
		}
		if r.Step > last {
			last = r.Step
		}
	}
	return first, last
}

// preciseTicks are gonum's default ticks labelled with the fewest digits that
// still give each labelled tick's value (the default can print 1.1 twice).
type preciseTicks struct{}

// Ticks returns the default ticks between lo and hi, relabelled.
func (preciseTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	span := math.Abs(hi - lo)
	for i := range ticks {
		if ticks[i].Label == "" {
			continue
		}
		v := ticks[i].Value
		for prec := 1; prec <= 8; prec++ {
			l := strconv.FormatFloat(v, 'g', prec, 64)
			if got, _ := strconv.ParseFloat(l, 64); math.Abs(got-v) <= 1e-6*span || prec == 8 {
				ticks[i].Label = l
				break
			}
		}
	}
	return ticks
}

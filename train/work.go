package train

// stepWork is what the micro-batches of a step count through
// StepInfo.Count (summed over the ranks).
type stepWork struct {
	samples, flops float64
	counted        bool
}

// Count records the work of the micro-batch: samples sequences (padding
// rows excluded) and flops floating-point operations (0: not counted).
// Run reports samples_per_s for steps whose micro-batches call it, and
// tflops (per rank) with mfu (Hooks.PeakTFLOPS) when they count FLOPs. A
// Step may ignore it.
func (s StepInfo) Count(samples int, flops float64) {
	if s.work == nil {
		return
	}
	s.work.samples += float64(samples)
	s.work.flops += flops
	s.work.counted = true
}

// rates adds the throughput of a step of sec seconds to vals: tokens_per_s,
// and when counted samples_per_s, tflops (per rank of ranks) and, with a
// peak, mfu (the tflops over peakTFLOPS).
func (w *stepWork) rates(vals map[string]float64, tokens int, sec float64, ranks int, peakTFLOPS float64) {
	sec = max(sec, 1e-9)
	vals["tokens_per_s"] = float64(tokens) / sec
	if !w.counted {
		return
	}
	vals["samples_per_s"] = w.samples / sec
	if w.flops > 0 {
		tf := w.flops / sec / 1e12 / float64(ranks)
		vals["tflops"] = tf
		if peakTFLOPS > 0 {
			vals["mfu"] = tf / peakTFLOPS
		}
	}
}

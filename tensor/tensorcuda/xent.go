package tensorcuda

import (
	"dflash/cuda"
	"dflash/gpu"
)

// SoftmaxXent treats logits (storage dtype) as rows×vocab. For each row r
// with targets[r] ≥ 0 it writes loss[r] = logsumexp(logits[r]) − logits[r][t]
// (fp32), argmax[r] (int32, the first maximal index) and overwrites logits[r]
// with scale[r]·(softmax(logits[r]) − onehot(t)) (scale fp32), the gradient
// of scale[r]·loss[r]. Rows with targets[r] < 0 get loss 0, argmax −1 and a
// zero gradient; a target ≥ vocab gets NaN loss, argmax −1 and a NaN row.
// One block per row, statistics in fp32.
func (o *Ops) SoftmaxXent(logits gpu.Buffer, rows, vocab int, targets, scale, loss, argmax gpu.Buffer) error {
	need("SoftmaxXent", "logits", logits, int64(rows)*int64(vocab), o.es())
	need("SoftmaxXent", "targets", targets, int64(rows), 4)
	need("SoftmaxXent", "scale", scale, int64(rows), 4)
	need("SoftmaxXent", "loss", loss, int64(rows), 4)
	need("SoftmaxXent", "argmax", argmax, int64(rows), 4)
	if rows == 0 {
		return nil
	}
	if vocab <= 0 {
		panic("tensorcuda: SoftmaxXent: empty vocabulary")
	}
	c := o.begin(kXent).ptr("logits", logits).i32("rows", rows).i32("vocab", vocab).
		ptr("targets", targets).ptr("scale", scale).ptr("loss", loss).ptr("argmax", argmax)
	return o.launch(c, cuda.Dim(uint32(rows), 1, 1), xentThreads)
}

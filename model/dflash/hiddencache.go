package dflash

import (
	"slices"

	"dflash/tensor"
)

// The target is frozen, so the hidden states it computes for a batch are
// the same at every use. A session caches them in one of two places:
//
//   - CacheHidden: on the host, per example, for training and evaluation
//     (small data sets: the target runs once per sequence).
//   - EvalCache: on the backend (AllocKeep: bf16 on CUDA), per evaluation
//     batch. The evaluation set and its batches (evalBatches) are fixed
//     for the run, so after the first evaluation an evaluation runs only
//     the drafter.

// training is the evaluation batch index of a training batch (batch,
// inputs).
const training = -1

// hidden fills b.Taps, the hidden states of evaluation batch eval (or a
// training batch): from the host cache with CacheHidden, from the kept
// states with EvalCache, else from the target.
func (s *Session) hidden(b *Batch, eval int) error {
	switch {
	case s.CacheHidden:
		return s.hostHidden(b, eval != training)
	case s.EvalCache && eval != training:
		return s.keptHidden(b, eval)
	}
	return s.Hidden(b)
}

// keptHidden fills the taps of evaluation batch i with the states kept at
// its first evaluation, copied into the step's memory (where the drafter's
// replayed forward reads the target's, so that every batch reads the same
// addresses). The first time it runs the target and keeps a copy.
func (s *Session) keptHidden(b *Batch, i int) error {
	if s.evalTaps == nil {
		s.evalTaps = make([][]*tensor.Tensor, len(s.evalPlan))
	}
	if kept := s.evalTaps[i]; kept != nil {
		b.Taps = copyTaps(s.Backend, kept, s.Backend.AllocOut)
		return nil
	}
	if err := s.Hidden(b); err != nil {
		return err
	}
	s.evalTaps[i] = copyTaps(s.Backend, b.Taps, s.Backend.AllocKeep)
	return nil
}

// copyTaps returns copies of taps on be, in storage from alloc.
func copyTaps(be tensor.Backend[float32], taps []*tensor.Tensor, alloc func(n int) tensor.Storage[float32]) []*tensor.Tensor {
	out := make([]*tensor.Tensor, len(taps))
	for t, x := range taps {
		n := x.Numel()
		out[t] = tensor.FromStorage(x.Name, alloc(n), x.Shape...)
		be.Copy2D(1, n, x.Store, n, 0, out[t].Store, n, 0, false)
	}
	return out
}

// Free gives back the backend memory the session keeps between steps, the
// evaluation cache (EvalCache); a later evaluation fills it anew.
func (s *Session) Free() {
	for _, taps := range s.evalTaps {
		for _, x := range taps {
			s.Backend.FreeKeep(x.Store)
		}
	}
	s.evalTaps = nil
}

// EvalCacheSize returns what the evaluation cache (Session.EvalCache) of a
// session with evaluation set eval, rows a batch, packing p (nil: a sample
// a row) and seed keeps for drafter config c: its batches (evalBatches')
// and the elements of their hidden states, rows × length × taps × hidden
// size a batch.
func EvalCacheSize(eval []Example, rows int, p *Packing, seed uint64, c *Config) (batches int, elems float64, err error) {
	if len(eval) == 0 {
		return 0, 0, nil
	}
	plan, err := planEval(eval, rows, p, seed)
	if err != nil {
		return 0, 0, err
	}
	perToken := float64(len(c.TargetLayerIDs)) * float64(c.HiddenSize)
	for _, b := range plan {
		if p != nil {
			elems += float64(rows) * float64(p.Len) * perToken
			continue
		}
		longest := 0
		for _, row := range b {
			longest = max(longest, len(eval[row[0]].IDs))
		}
		elems += float64(len(b)) * float64(longest) * perToken
	}
	return len(plan), elems, nil
}

// hostHidden fills b.Taps from the per-example host cache (CacheHidden)
// of the training (eval false) or evaluation set.
func (s *Session) hostHidden(b *Batch, eval bool) error {
	// Each example's rows of hidden states, per tap (the same whatever row
	// or batch it is in: attention stays inside a sample). A batch with
	// any example missing runs the target once for the batch.
	H := s.Drafter.Cfg.HiddenSize
	key := func(i int) cacheKey { return cacheKey{eval, i} }
	s.mu.Lock()
	if s.cache == nil {
		s.cache = map[cacheKey][][]float32{}
	}
	hit := true
	for r := range b.Rows {
		for _, sg := range b.RowSegs(r) {
			if _, ok := s.cache[key(sg.Example)]; !ok {
				hit = false
			}
		}
	}
	s.mu.Unlock()
	if !hit {
		if err := s.Hidden(b); err != nil {
			return err
		}
		hidden := make([][]float32, len(b.Taps))
		for t, x := range b.Taps {
			hidden[t] = make([]float32, x.Numel())
			s.Backend.Download(x.Store, hidden[t])
		}
		s.mu.Lock()
		for r := range b.Rows {
			for _, sg := range b.RowSegs(r) {
				rows := make([][]float32, len(hidden))
				for t, h := range hidden {
					rows[t] = slices.Clone(h[(r*b.Len+sg.Start)*H : (r*b.Len+sg.End())*H])
				}
				s.cache[key(sg.Example)] = rows
			}
		}
		s.mu.Unlock()
		return nil
	}
	hidden := make([][]float32, len(s.Drafter.Cfg.TargetLayerIDs))
	for t := range hidden {
		hidden[t] = make([]float32, b.Rows*b.Len*H)
	}
	s.mu.Lock()
	for r := range b.Rows {
		for _, sg := range b.RowSegs(r) {
			for t, rows := range s.cache[key(sg.Example)] {
				copy(hidden[t][(r*b.Len+sg.Start)*H:], rows)
			}
		}
	}
	s.mu.Unlock()
	b.Taps = UploadTaps(s.Backend, hidden, b.Rows*b.Len, H)
	return nil
}

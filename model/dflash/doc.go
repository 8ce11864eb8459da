// Package dflash is the DFlash drafter of docs/DRAFTER.md: N Qwen3-style
// layers that read the target's tapped hidden states through fc + RMSNorm
// (KV injection), predict a block of B tokens in one pass from
// [anchor token, MASK × (B−1)], and use the target's frozen embedding and LM
// head.
//
// Training (Drafter.Forward with a recording tape) samples anchors per step
// (SampleBatchAnchors), lays out blocks and labels (BuildBlocks), attends
// with flex.DFlashMask, and computes the decayed, chunked cross-entropy
// (weights exp(−(k−1)/γ), slot 0 excluded). Metrics accumulates loss,
// per-slot accuracy and the simulated acceptance length. Session connects a
// drafter, a target and in-memory examples to train.Run. Config reads and
// writes config.json; WriteDir and LoadDir the HF-style directory that
// DFlash inference code loads.
//
// The forward pass and every gradient match the PyTorch reference
// (bench/drafter_ref.py) to 2e-15 in float64 and 2e-6 in float32
// (testdata/golden_drafter.safetensors).
package dflash

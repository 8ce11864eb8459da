// Package spec is speculative decoding with a DFlash drafter
// (docs/DRAFTER.md §7): the target prefills the prompt with a KV cache and
// hands the drafter the hidden states of its tapped layers; each round the
// drafter proposes a block [last token, MASK × (B−1)] in one forward pass,
// the target verifies the block in one forward pass (model.Decode), the
// longest agreeing prefix plus the target's own next token is accepted, the
// target's cache is truncated past the accepted tokens and the drafter's
// context takes their hidden states.
//
// GenerateBatch decodes several prompts at once: each round drafts every
// running row's block in one drafter pass and verifies them in one target
// pass (model.DecodeRows) per block length, the weights read once for the
// batch; each row accepts and rolls back on its own, with its own
// generator, and leaves the batch when it is done. Generate is the batch
// of one.
//
// Greedy decoding is lossless: the output is the target's own greedy output
// (up to argmax ties that the block-wide arithmetic of verification may
// break differently than one-token steps, see the tests). With a
// temperature, drafts are accepted by the speculative sampling rule (accept
// x with probability min(1, p(x)/q(x)), else sample from norm(max(0, p−q)),
// a bonus token from p when all are accepted), so the output has the
// target's own sampling distribution.
//
// What decoding reads back from the backend: greedily, argmax ids only
// (model.ReadRows; the argmax of each row runs on the backend,
// tensor.RowArgmax): one id after the prefill, then per round B int32 of
// the drafter's block and n of the target's verification of n ≤ B tokens,
// two small copies instead of (B + n) rows of vocabulary floats (for
// Qwen3's 151936 and blocks of 16: 128 bytes instead of 19.4 MB). Sampling
// reads the drafter's and the target's logits into host memory ([B, V] and
// [n, V] float32): the acceptance rule needs the whole distributions.
//
// Run measures a drafter on a set of prompts, a batch at a time:
// acceptance length (tokens per target verification), acceptance per block
// position, and tokens/s with and without the drafter on the same prompts,
// batches and backend.
package spec

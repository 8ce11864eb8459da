package recipe

import (
	"fmt"
	"math/rand/v2"

	"dflash/data/tokenizer"
	"dflash/internal/rngstream"
	"dflash/model"
	"dflash/model/dflash"
)

// DrafterConfig returns the drafter of o for target tc with mask token
// mask: tc's attention shape, o.Layers layers tapping o.Taps (empty:
// dflash.DefaultTaps, spread from 1 to L-3), o.BlockSize, o.Anchors anchors
// a sequence, and o.Gamma and o.Intermediate when set (else the block
// size's default gamma and the target's MLP width). The taps are checked
// by dflash.CheckTaps, the whole by dflash.Config.Validate.
func DrafterConfig(tc *model.Config, o DrafterOptions, mask int) *dflash.Config {
	dc := dflash.DrafterConfigFor(&model.Model{Config: *tc}, o.Layers, o.Taps, o.BlockSize, mask)
	if o.Gamma != 0 {
		dc.Gamma = o.Gamma
	}
	if o.Intermediate > 0 {
		dc.IntermediateSize = o.Intermediate
	}
	dc.NumAnchors = o.Anchors
	return dc
}

// MaskToken chooses the mask token: id when >= 0, else the tokenizer's
// <|MASK|>, else the first id past the tokenizer's vocabulary when the
// target's embedding (vocab rows) has that row (as adding a special token
// does).
func MaskToken(id int, tok *tokenizer.Tokenizer, vocab int) (int, error) {
	if id >= 0 {
		if id >= vocab {
			return 0, fmt.Errorf("id %d is outside the target's vocabulary [0, %d)", id, vocab)
		}
		return id, nil
	}
	if t, ok := tok.TokenID("<|MASK|>"); ok {
		return int(t), nil
	}
	if n := tok.VocabSize(); n < vocab {
		return n, nil
	}
	return 0, fmt.Errorf("the tokenizer has no <|MASK|> token and the embedding no spare row: set --drafter.mask-token-id")
}

// PadToken returns the id that pads the rows of a batch: the tokenizer's
// <|endoftext|>, else 0.
func PadToken(tok *tokenizer.Tokenizer) int32 {
	if id, ok := tok.TokenID("<|endoftext|>"); ok {
		return id
	}
	return 0
}

// Split shuffles examples in place with the data stream of seed
// (rngstream.Data) and holds out the first min(maxEval, max(1,
// ⌊len·fraction⌋)) for evaluation: it returns the training and the
// evaluation examples, both sharing examples' array.
func Split[E any](examples []E, seed uint64, fraction float64, maxEval int) (trainSet, eval []E) {
	rng := rand.New(rand.NewPCG(seed, rngstream.Data))
	rng.Shuffle(len(examples), func(i, j int) { examples[i], examples[j] = examples[j], examples[i] })
	n := min(maxEval, max(1, int(float64(len(examples))*fraction)))
	return examples[n:], examples[:n]
}

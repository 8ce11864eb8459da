package dflash

import (
	"fmt"
	"log/slog"

	"dflash/data/tokenizer"
)

// DefaultMaskToken is the mask token's name that SGLang assumes when
// dflash_config.mask_token is absent, the name published DFlash code adds to
// a tokenizer that lacks it, and the token dflash train looks for first.
const DefaultMaskToken = "<|MASK|>"

// MaskTokenName returns the name of mask token id in the target's tokenizer
// tok, the dflash_config.mask_token an export writes beside the id: the
// token's own name when tok has one at id (an added token's content, a
// vocabulary entry as tokenizer.json spells it), else DefaultMaskToken (an
// id past the tokenizer, the row adding the mask token would fill).
//
// When tok holds DefaultMaskToken at another id it is an error naming both
// ids: SGLang resolves the mask by that name and refuses to start when the
// config's id differs, and a drafter trained on another mask than the one the
// tokenizer provides is a mistake to catch before training.
func MaskTokenName(tok *tokenizer.Tokenizer, id int) (string, error) {
	if m, ok := tok.TokenID(DefaultMaskToken); ok && int(m) != id {
		return "", fmt.Errorf("mask token id %d: the target's tokenizer has %s at id %d (SGLang resolves the mask by that name and refuses another id): use %d",
			id, DefaultMaskToken, m, m)
	}
	if name, ok := tok.VocabName(int32(id)); ok {
		return name, nil
	}
	return DefaultMaskToken, nil
}

// WarnTaps logs a warning on log when a tap is the target's last layer
// (numTargetLayers-1) and reports whether it did. That tap's state is the
// final-normed one (HF's hidden_states[L], as here and in z-lab's code), but
// SGLang captures a tap at the input of the next layer, which the last
// layer does not have: SGLang fails at start (sgl-project/sglang issue
// 32204) or would feed the drafter the state before the final norm.
func WarnTaps(log *slog.Logger, taps []int, numTargetLayers int) bool {
	for _, t := range taps {
		if t == numTargetLayers-1 {
			log.Warn("a tap is the target's last layer: SGLang cannot capture it (its capture reads the next layer's input; sglang issue 32204), so this drafter will not serve there; choose taps below it",
				"taps", taps, "last_layer", t, "target_layers", numTargetLayers)
			return true
		}
	}
	return false
}

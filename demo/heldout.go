package demo

import (
	"bytes"
	"encoding/json"

	"dflash/internal/atomicfile"
)

// HeldOutFile is the file, under Options.Dir, holding the user messages of
// the held-out prompts the demo decodes speculatively, as messages JSONL:
//
//	dflash spec --target DIR/target --drafter DIR/drafter --prompts DIR/heldout.jsonl --max-new-tokens 96
//
// repeats the demo's last stage (the same prompt tokens: the chat template
// with the generation prompt; the same stop token: the target's EOS).
const HeldOutFile = "heldout.jsonl"

type heldOutMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// writeHeldOut writes one {"messages": [{"role": "user", ...}]} line per prompt.
func writeHeldOut(path string, users []string) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, u := range users {
		if err := enc.Encode(map[string][]heldOutMessage{"messages": {{Role: "user", Content: u}}}); err != nil {
			return err
		}
	}
	return atomicfile.WriteFile(path, buf.Bytes())
}

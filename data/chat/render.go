package chat

import (
	"fmt"
	"maps"
	"strings"

	"dflash/data/tokenizer"
)

// Span is a byte range [Start, End) of rendered text.
type Span struct{ Start, End int }

// Render returns the text of msgs under the template and the spans of
// assistant-generated text (the mask rule in the package doc).
func (t *Template) Render(msgs []Message, opts Options) (string, []Span, error) {
	if len(msgs) == 0 {
		return "", nil, fmt.Errorf("chat: empty conversation")
	}
	nAssistant := 0
	for _, m := range msgs {
		if m.Role == "assistant" {
			nAssistant++
		}
	}
	text, err := t.tmpl.Render(t.data(msgs, opts))
	if err != nil {
		return "", nil, fmt.Errorf("chat: rendering %s: %w", t.name(), err)
	}
	spans := t.spans(text, opts.EnableThinking)
	if len(spans) != nAssistant {
		return "", nil, fmt.Errorf("chat: rendered text has %d assistant turns but the conversation has %d assistant messages (does a message contain %q or %q?)",
			len(spans), nAssistant, t.fam.header, t.fam.eot)
	}
	return text, spans, nil
}

// data is the template's variables for msgs: those HF apply_chat_template
// passes (tools and documents none, as without tools), Qwen3's
// enable_thinking, and the special tokens.
func (t *Template) data(msgs []Message, opts Options) map[string]any {
	list := make([]any, len(msgs))
	for i, m := range msgs {
		mm := map[string]any{"role": m.Role, "content": m.Content}
		if m.ReasoningContent != nil {
			mm["reasoning_content"] = *m.ReasoningContent
		}
		list[i] = mm
	}
	vars := maps.Clone(t.vars)
	if vars == nil {
		vars = map[string]any{}
	}
	vars["messages"] = list
	vars["tools"] = nil
	vars["documents"] = nil
	vars["add_generation_prompt"] = opts.AddGenerationPrompt
	vars["enable_thinking"] = opts.EnableThinking
	return vars
}

func (t *Template) name() string {
	if t.path != "" {
		return t.path
	}
	return t.fam.name + " template"
}

// spans applies steps 1-3 of the mask rule.
func (t *Template) spans(text string, thinking bool) []Span {
	var out []Span
	for cur := 0; ; {
		h := strings.Index(text[cur:], t.fam.header)
		if h < 0 {
			return out
		}
		start := cur + h + len(t.fam.header)
		end := len(text)
		if e := strings.Index(text[start:], t.fam.eot); e >= 0 {
			end = start + e + len(t.fam.eot)
		}
		if !thinking && t.fam.emptyThink != "" && strings.HasPrefix(text[start:end], t.fam.emptyThink) {
			start += len(t.fam.emptyThink)
		}
		if end > start {
			out = append(out, Span{start, end})
		}
		cur = end
	}
}

// Encoded is a tokenized conversation.
type Encoded struct {
	IDs  []int32
	Mask []uint8 // 1 on tokens the model generates
	// Crossing counts tokens that start before an assistant span and end
	// inside it (rule 5); they are not marked.
	Crossing int
}

// Encode renders msgs and tokenizes the text, returning the ids and the
// assistant-only loss mask (1 on tokens the model generates).
func (t *Template) Encode(tok *tokenizer.Tokenizer, msgs []Message, opts Options) (ids []int32, mask []uint8, err error) {
	e, err := t.EncodeSample(tok, msgs, opts)
	return e.IDs, e.Mask, err
}

// EncodeSample is Encode with the count of boundary-crossing tokens.
func (t *Template) EncodeSample(tok *tokenizer.Tokenizer, msgs []Message, opts Options) (Encoded, error) {
	text, spans, err := t.Render(msgs, opts)
	if err != nil {
		return Encoded{}, err
	}
	ids, starts := tok.EncodeOffsets(text)
	mask, crossing := maskTokens(starts, len(text), spans)
	return Encoded{IDs: ids, Mask: mask, Crossing: crossing}, nil
}

// maskTokens marks tokens whose first byte lies in a span (rule 5) and
// counts the tokens that start before a span and end inside it.
func maskTokens(starts []int32, textLen int, spans []Span) (mask []uint8, crossing int) {
	mask = make([]uint8, len(starts))
	k := 0
	for i, s := range starts {
		end := textLen
		if i+1 < len(starts) {
			end = int(starts[i+1])
		}
		for k < len(spans) && spans[k].End <= int(s) {
			k++
		}
		switch {
		case k == len(spans):
		case spans[k].Start <= int(s):
			mask[i] = 1
		case end > spans[k].Start:
			crossing++
		}
	}
	return mask, crossing
}

// Package chat renders conversations with a model's own chat template and
// turns them into token ids with an assistant-only loss mask.
//
// The template is the Jinja source in the model directory
// (tokenizer_config.json "chat_template", or chat_template.jinja), run by a
// Go Jinja engine (github.com/ardanlabs/jinja), so the text is what HF
// apply_chat_template gives (golden-tested for Qwen3 and Llama-3). A
// template the engine cannot compile or render is an error naming the
// template and the engine's message; so is a template whose turn markers
// dflash does not know (see below). The engine renders an undefined name as
// empty and has no strict mode, so Load refuses a template that reads a
// variable it does not set, dflash does not pass (messages, tools and
// documents as none, add_generation_prompt, enable_thinking, the special
// tokens of tokenizer_config.json) and Jinja does not define, unless the
// template guards it (is defined, default); the error names each such
// variable and its line. An undefined attribute (message.contnet) is not
// caught: messages lack optional keys by design and the engine cannot tell
// a miss from a typo.
//
// # Loss mask rule
//
// The mask marks exactly the tokens the model generates in an assistant
// turn: everything after the assistant header up to and including the
// end-of-turn token. Headers, the newline after end-of-turn, system, user and
// tool text are not marked. Concretely, on the rendered text R, with the
// template family's assistant header H and end-of-turn marker E:
//
//  1. from a cursor at 0, find the next H; the span starts after it and ends
//     after the next E (at the end of R if no E follows); the cursor moves
//     to the span's end; repeat;
//  2. an empty span (a generation prompt at the end of R, as Llama-3's
//     template always appends) is dropped;
//  3. with EnableThinking false, a span that starts with the empty thinking
//     block "<think>\n\n</think>\n\n" starts after it (at inference that block
//     is part of the prompt); with EnableThinking true the thinking block,
//     empty or not, is generated and so is marked;
//  4. the number of spans must equal the number of assistant messages
//     (otherwise a message holds marker text: an error);
//  5. a token is marked when its first byte lies in a span. A span ends with
//     the end-of-turn special token, so no token crosses its end; a token can
//     start before a span and end inside it when the template's header
//     newline merges with newlines that open the content (Qwen3 keeps a
//     historical turn's leading newlines): such a token is not marked, as
//     the header it starts in is prompt, and EncodeSample counts it.
//
// Families (found by their markers in the template source):
//
//	chatml (Qwen2, Qwen2.5, Qwen3): H = "<|im_start|>assistant\n", E = "<|im_end|>"
//	llama3:                          H = "<|start_header_id|>assistant<|end_header_id|>\n\n", E = "<|eot_id|>"
//
// Qwen3 thinking: an assistant message may carry its reasoning in
// ReasoningContent or inline as "<think>...</think>" in Content; the
// template drops the reasoning of turns before the last user message, as HF
// does.
package chat

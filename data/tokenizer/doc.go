// Package tokenizer encodes and decodes text with the byte-level BPE
// tokenizers that HF models ship as tokenizer.json (GPT-2, Qwen2/Qwen3,
// Llama-3 style).
//
// Encode gives the ids that HF `tokenizers` gives for
// tokenizer.encode(text, add_special_tokens=False): added tokens (special or
// not) are matched in the raw text first, leftmost and longest; the text
// between them is normalised (NFC, where the file asks for it), split by the
// pre-tokenizer, mapped to bytes and merged by rank. Post-processors are
// never applied: a BOS or EOS token is the caller's (the chat template's)
// business. Decode inverts Encode: Decode(Encode(x)) == x for text that is
// already in the file's normal form.
//
// Supported tokenizer.json features, and nothing else (anything else is an
// error that names the field):
//
//   - model: BPE with merges (either "a b" strings or ["a","b"] pairs),
//     ignore_merges, no dropout, no byte_fallback, no continuing-subword
//     prefix or end-of-word suffix;
//   - normalizer: null or NFC (alone or in a Sequence);
//   - pre_tokenizer: ByteLevel (add_prefix_space false), optionally after one
//     or more Split steps (behavior Isolated, invert false) whose pattern is
//     a Regex or a String. The GPT-2, Qwen2 and Llama-3 split patterns run on
//     hand-written scanners (fast path); any other regex runs on regexp2;
//   - decoder: ByteLevel (alone or in a Sequence);
//   - post_processor: null, ByteLevel, TemplateProcessing (not applied);
//   - added_tokens without lstrip, rstrip or single_word.
//
// Speed: the word cache and the scanners keep Encode above 20 MB/s per core
// on English text (docs/PERF.md); EncodeBatch spreads documents over cores.
// A Tokenizer is safe for concurrent use.
package tokenizer

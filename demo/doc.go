// Package demo builds everything `dflash demo` needs on a fresh machine,
// offline and on the CPU: a corpus of Go source from GOROOT, a byte-level
// BPE tokenizer trained on it (written as HF tokenizer.json and
// tokenizer_config.json), a tiny Qwen3 target trained on the corpus,
// conversations whose responses the target generates greedily, and a DFlash
// drafter trained on them, with its evaluation before and after training,
// and real speculative decoding of held-out prompts with it (package spec).
// With Options.Device cuda every stage after the tokenizer runs on one GPU
// (traincuda.RunOne, the placement of train and spec) at GPU size
// (GPUDefaults), through the same code on the GPU's backend.
package demo

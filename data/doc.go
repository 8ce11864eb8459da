// Package data turns the datasets users have into training samples: chat
// conversations in JSONL files are rendered with the target model's chat
// template, tokenized with its tokenizer.json, masked so that only
// assistant-generated tokens carry loss, filtered, and written as
// memory-mappable shards that the trainer reads back by index.
//
// Sub-packages, one concept each:
//
//	data/tokenizer  byte-level BPE from HF tokenizer.json (encode, decode)
//	data/chat       chat templates (Jinja, from tokenizer_config.json) and the
//	                assistant-only loss mask rule
//	data/jsonl      streaming messages / ShareGPT JSONL readers (gzip, zstd)
//	data/shard      the prepared-data FORMAT, its atomic writer and mmap reader
//	data/bucket     length bucketing into fixed-shape batches, resumable
//	data/order      the epoch order of fixed-size batches, resumable
//
// Prep is the preprocessing pipeline behind `dflash data prep`: it reads the
// files in order, renders and tokenizes on all cores, and keeps the input
// order when it writes (so its output depends only on its inputs and
// options). Per conversation, in this order:
//
//  1. a line that is not a valid conversation is bad (jsonl.LineError);
//  2. a conversation the template cannot render (or whose rendered text
//     holds more or fewer assistant turns than it has) is bad too;
//  3. a sample longer than MaxLen is truncated to MaxLen or dropped;
//  4. a sample with fewer than 2 x BlockSize supervised tokens is dropped
//     (it cannot hold one DFlash block after an anchor).
//
// A bad line ends the run with an error naming file and line, unless
// SkipBadLines is set: then bad lines are counted by reason and skipped.
// The Summary says how many lines were read, kept and dropped, and why.
//
// Open opens a prepared directory for training: Dataset.Len, and
// Dataset.Sample(i) returning (ids []int32, lossMask []uint8).
package data

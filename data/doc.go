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
// options). Options holds the rules that make a conversation a sample, and
// their defaults; `dflash train` on JSONL reads through the same pipeline
// with the same Options (Load), so both paths give the same samples. Input
// with no usable conversation is an error naming the files and the lines
// read.
//
// Open opens a prepared directory: Dataset.Len, and Dataset.Sample(i)
// returning (ids []int32, lossMask []uint8). OpenFor opens it for training a
// target: the tokenizer hash in meta.json, every shard's checksum and every
// id against the vocabulary are checked first.
package data

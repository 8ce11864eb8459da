// Package safetensors reads and writes the safetensors tensor file format and the
// Hugging Face model directories built from it.
//
// A safetensors file is an 8-byte little-endian header length N, N bytes of JSON, then
// the tensor data. The JSON maps each tensor name to {"dtype", "shape", "data_offsets"}
// (offsets relative to the first data byte, [begin, end)); the optional key
// "__metadata__" maps strings to strings.
//
// Open validates the whole header before any data is read: the length is in bounds, the
// JSON parses, every dtype is known, every shape's byte size equals its offsets' span,
// and the spans lie inside the file without overlapping. A violation is a *FormatError
// naming the file and, where there is one, the tensor. Tensor data is read lazily, one
// tensor at a time, so opening a large checkpoint costs only its header; Dir.RawWeight
// gives a weight's place in its shard, so that several goroutines read its bytes in
// pieces (a model's load at disk speed).
//
// OpenDir presents an HF model directory (model.safetensors, or the shards listed in
// model.safetensors.index.json) as one name space. Write produces a file atomically:
// it writes a temporary file in the destination directory, syncs it and renames it.
//
// Files and Dirs are safe for concurrent use by several goroutines.
package safetensors

// Package shard writes and memory-maps prepared training data: token ids
// with their loss mask, one sample per conversation.
//
// # FORMAT
//
// A prepared dataset is a directory:
//
//	meta.json          what is in it (below); written last
//	shard-00000.bin    samples, sorted by length within the shard
//	shard-00001.bin    ...
//
// meta.json holds {"format": "dflash-shards", "version": 1, "samples",
// "tokens", "supervised", "shards": [{"file", "samples", "tokens",
// "min_len", "max_len", "crc32c", "max_id"}], "info": {...}}; "info" is the
// producer's record (tokenizer hash, options, summary). The global sample
// index runs through the shards in the listed order.
//
// A shard file, all integers little-endian:
//
//	offset  size  field
//	0       8     magic "DFSHARD\x00"
//	8       4     version (1)
//	12      4     flags (0)
//	16      8     n: number of samples
//	24      8     t: number of tokens
//	32      8     offsets section offset (64)
//	40      8     ids section offset (8-aligned)
//	48      8     mask section offset
//	56      4     CRC-32C (Castagnoli) of every byte after the header
//	60      4     reserved (0)
//	64            offsets: n+1 uint64, token index where sample i starts;
//	              offsets[0] = 0, offsets[n] = t, non-decreasing
//	              ids: t int32
//	              mask: t uint8 (1 = supervised: an assistant-generated token)
//
// Sample i of a shard is ids[offsets[i]:offsets[i+1]] with the same range of
// mask. Within a shard samples are sorted by length (ties keep input order).
// The layout is memory-mappable: Open maps each file read-only and returns
// slices into the mapping without copying (on little-endian Unix hosts; it
// reads the file into memory elsewhere).
//
// Writing is atomic: a Writer fills a temporary sibling directory, fsyncs
// it and renames it to the output directory at Finish, so a reader sees a
// whole dataset or none. The temporary directory's name holds the writer's
// pid; a writer that was killed leaves it behind, and the next Create of
// the same output removes it once that process is gone.
//
// Open checks the headers against meta.json; Verify reads every byte once
// (the body's CRC-32C and the id range, in parallel over shards) and
// CheckIDs reports an id outside the target's vocabulary, both naming the
// shard.
package shard

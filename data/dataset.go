package data

import "dflash/data/shard"

// Dataset is a prepared directory opened for training (see data/shard for
// the FORMAT). Sample(i) returns (ids []int32, lossMask []uint8) as views
// into memory-mapped files.
type Dataset = shard.Dataset

// Open opens a directory written by Prep.
func Open(dir string) (*Dataset, error) { return shard.Open(dir) }

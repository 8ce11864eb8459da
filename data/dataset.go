package data

import (
	"encoding/json"
	"fmt"

	"dflash/data/shard"
)

// Dataset is a prepared directory opened for training (see data/shard for
// the FORMAT). Sample(i) returns (ids []int32, lossMask []uint8) as views
// into memory-mapped files.
type Dataset = shard.Dataset

// Open opens a directory written by Prep (without reading every byte: see
// OpenFor for training).
func Open(dir string) (*Dataset, error) { return shard.Open(dir) }

// infoOf decodes meta.json's "info" as Prep wrote it.
func infoOf(d *Dataset) (Info, error) {
	var info Info
	raw, err := json.Marshal(d.Meta().Info)
	if err == nil {
		err = json.Unmarshal(raw, &info)
	}
	if err != nil {
		return info, fmt.Errorf("%s: meta.json info: %w", d.Dir(), err)
	}
	return info, nil
}

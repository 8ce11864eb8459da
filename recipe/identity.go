package recipe

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"dflash/data"
	"dflash/data/tokenizer"
	"dflash/internal/switches"
	"dflash/model/dflash"
)

// runIdentity is what makes a training run the same run on resume (train.Hooks.Identity):
// the drafter's shape and taps, the target, the tokenizer, the data and the split,
// the number of length buckets (--data.buckets) when there are any and the
// packed row length when batches are packed: recorded only then, so that
// checkpoints of runs with batches padded per sample stay of the same run. The
// same holds for the switches that change numbers (switches.Identity): each is
// recorded when it is not at its default.
func runIdentity(targetDir string, dataArgs []string, dc *dflash.Config, tok *tokenizer.Tokenizer, nTrain, nEval, buckets, packLen int) (map[string]string, error) {
	target, err := hashFiles([]string{filepath.Join(targetDir, "config.json")})
	if err != nil {
		return nil, err
	}
	data, err := dataIdentity(dataArgs)
	if err != nil {
		return nil, err
	}
	taps := make([]string, len(dc.TargetLayerIDs))
	for i, l := range dc.TargetLayerIDs {
		taps[i] = strconv.Itoa(l)
	}
	id := map[string]string{
		"drafter.layers":            strconv.Itoa(dc.NumLayers),
		"drafter.block-size":        strconv.Itoa(dc.BlockSize),
		"drafter.taps":              strings.Join(taps, ","),
		"drafter.mask-token-id":     strconv.Itoa(dc.MaskTokenID),
		"drafter.intermediate-size": strconv.Itoa(dc.IntermediateSize),
		"target config.json":        target,
		"tokenizer":                 "sha256:" + tok.Hash(),
		"data":                      data,
		"conversations":             fmt.Sprintf("%d train, %d eval", nTrain, nEval),
	}
	if buckets > 0 {
		id["data.buckets"] = strconv.Itoa(buckets)
	}
	if packLen > 0 {
		id["data.pack-len"] = strconv.Itoa(packLen)
	}
	sw, err := switches.Identity()
	if err != nil {
		return nil, err
	}
	maps.Copy(id, sw)
	return id, nil
}

// dataIdentity names the data behind --data, its inputs in order: a prepared
// directory by its meta.json (which lists every shard with its size), JSONL
// input by the content of its files.
func dataIdentity(args []string) (string, error) {
	var all []string
	for _, arg := range args {
		paths, prepared, err := data.InputFiles(arg)
		if err != nil {
			return "", err
		}
		if prepared {
			paths = []string{filepath.Join(arg, "meta.json")}
		}
		all = append(all, paths...)
	}
	return hashFiles(all)
}

// hashFiles returns "sha256:<hex>" of the files' contents, each preceded by its length.
func hashFiles(paths []string) (string, error) {
	h := sha256.New()
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return "", err
		}
		st, err := f.Stat()
		if err == nil {
			fmt.Fprintf(h, "%d\n", st.Size())
			_, err = io.Copy(h, f)
		}
		f.Close()
		if err != nil {
			return "", fmt.Errorf("%s: %w", p, err)
		}
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

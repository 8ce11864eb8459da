package jit

import (
	"bytes"
	"context"
	"slices"
	"testing"
)

// hostileOptions hold the bytes an encoding of option lists might reserve:
// 0 (the old separator) and small numbers that read as lengths.
var hostileOptions = []string{"", "\x00", "a", "a\x00", "\x00a", "\x01", "\x01a", "\x02\x00"}

// TestSrcKeyIsInjective checks, over every list of up to three options
// drawn from hostileOptions, that two lists share a memory-tier index key
// only when they are equal. The 0-separated encoding this replaced mapped
// ["a\x00", ""] and ["a", "\x00"] to one key.
func TestSrcKeyIsInjective(t *testing.T) {
	lists := [][]string{nil}
	for n := 1; n <= 3; n++ {
		for _, l := range lists {
			if len(l) != n-1 {
				continue
			}
			for _, o := range hostileOptions {
				lists = append(lists, append(slices.Clone(l), o))
			}
		}
	}
	seen := map[srcKey][]string{}
	for _, l := range lists {
		k := makeSrcKey(Source{Code: "c", Arch: "sm_90", Options: l})
		if prev, ok := seen[k]; ok && !slices.Equal(prev, l) {
			t.Fatalf("options %q and %q share one index key", prev, l)
		}
		seen[k] = l
	}
	if len(seen) != len(lists) {
		t.Fatalf("%d index keys for %d lists", len(seen), len(lists))
	}
}

// TestCollidingOptionListsGetTheirOwnImages asks one cache for two sources
// whose option lists collided in the old index: each must get the image
// compiled from its own options.
func TestCollidingOptionListsGetTheirOwnImages(t *testing.T) {
	for _, pair := range [][2][]string{
		{{"-DA\x00-DB", "-DC"}, {"-DA", "-DB\x00-DC"}},
		{{"a\x00", ""}, {"a", "\x00"}},
	} {
		for _, disk := range []bool{false, true} {
			dir := ""
			if disk {
				dir = t.TempDir()
			}
			fc := newFake(0)
			c, _ := newCache(t, fc, dir)
			for _, opts := range pair {
				s := Source{Family: "k", Code: "code", Arch: "sm_90", Options: opts}
				for range 2 { // the second Get is a memory hit
					img, err := c.Get(context.Background(), s)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(img.Data, fakeImage(s, fc.size)) {
						t.Fatalf("options %q (disk %v): served the image of other options", opts, disk)
					}
				}
			}
			if n := fc.calls.Load(); n != 2 {
				t.Errorf("disk %v: %d compiles, want 2", disk, n)
			}
		}
	}
}

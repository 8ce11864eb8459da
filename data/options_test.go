package data

import (
	"slices"
	"testing"
)

// TestFitContext: no sample passes the target's context, whatever --max-len says
// (0: no limit of its own): a longer one is cut to the shorter of the two limits,
// or dropped with DropLong, by the rule spec refuses longer prompts with
// (FitsContext).
func TestFitContext(t *testing.T) {
	ids := make([]int32, 100)
	mask := make([]uint8, 100)
	for i := range ids {
		ids[i], mask[i] = int32(i+7), 1
	}
	for _, c := range []struct {
		maxLen, context int
		dropLong        bool
		wantLen         int // 0: dropped
	}{
		{0, 0, false, 100},
		{0, 100, false, 100},
		{0, 64, false, 64},
		{0, 64, true, 0},
		{80, 64, false, 64},
		{40, 64, false, 40},
		{200, 64, false, 64},
		{50, 0, false, 50},
	} {
		o := Options{MaxLen: c.maxLen, Context: c.context, DropLong: c.dropLong, BlockSize: 4}
		got, gotMask, sup, truncated, drop := o.Fit(ids, mask)
		switch {
		case c.wantLen == 0 && drop != DropTooLong:
			t.Errorf("%+v: kept %d tokens (%q), want dropped as %q", o, len(got), drop, DropTooLong)
		case c.wantLen > 0 && (len(got) != c.wantLen || !slices.Equal(got, ids[:c.wantLen]) || len(gotMask) != c.wantLen ||
			sup != c.wantLen || truncated != (c.wantLen < len(ids)) || drop != ""):
			t.Errorf("%+v: %d tokens, %d supervised, truncated %v, drop %q; want %d tokens", o, len(got), sup, truncated, drop, c.wantLen)
		}
		if c.wantLen > 0 && !FitsContext(len(got), c.context) {
			t.Errorf("%+v: a kept sample of %d tokens does not fit the context %d", o, len(got), c.context)
		}
	}
	for _, c := range []struct {
		n, limit int
		fits     bool
	}{{10, 0, true}, {10, 10, true}, {11, 10, false}, {1 << 40, -1, true}} {
		if FitsContext(c.n, c.limit) != c.fits {
			t.Errorf("FitsContext(%d, %d) = %v", c.n, c.limit, !c.fits)
		}
	}
}

package gpu

import (
	"errors"
	"slices"
	"testing"
)

func TestParseOrdinals(t *testing.T) {
	four := func() (int, error) { return 4, nil }
	none := func() (int, error) { return 0, errors.New("libcuda.so.1 not found") }
	for _, c := range []struct {
		in    string
		count func() (int, error)
		want  []int
		err   string
	}{
		{"", none, nil, ""},
		{"0", none, []int{0}, ""},
		{" 2, 0 ,1", none, []int{2, 0, 1}, ""},
		{"all", four, []int{0, 1, 2, 3}, ""},
		{"all", none, nil, "--gpus all: libcuda.so.1 not found"},
		{"all", func() (int, error) { return 0, nil }, nil, "--gpus all: no CUDA GPU present"},
		{"0,x", none, nil, `--gpus "0,x": "x" is not a GPU ordinal (0, 1, ...; or all)`},
		{"-1", none, nil, `--gpus "-1": "-1" is not a GPU ordinal (0, 1, ...; or all)`},
		{"0,", none, nil, `--gpus "0,": "" is not a GPU ordinal (0, 1, ...; or all)`},
		{"1,1", none, nil, `--gpus "1,1": GPU 1 is listed twice`},
	} {
		got, err := ParseOrdinals("--gpus", c.in, c.count)
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("%q: err %v, want %s", c.in, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%q: %v %v, want %v", c.in, got, err, c.want)
		}
	}
}

package gpu

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseOrdinals reads a list of GPUs as a command line gives it: "" for
// none given (nil), "all" for every GPU count reports, or ordinals
// separated by commas ("0,1,3"). An ordinal that is not a number, negative,
// or repeated is an error naming flag and the entry; whether each GPU
// exists is for Open to say.
func ParseOrdinals(flag, s string, count func() (int, error)) ([]int, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "":
		return nil, nil
	case "all":
		n, err := count()
		if err != nil {
			return nil, fmt.Errorf("%s all: %w", flag, err)
		}
		if n == 0 {
			return nil, fmt.Errorf("%s all: no CUDA GPU present", flag)
		}
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out, nil
	}
	var out []int
	seen := map[int]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		g, err := strconv.Atoi(f)
		if err != nil || g < 0 {
			return nil, fmt.Errorf("%s %q: %q is not a GPU ordinal (0, 1, ...; or all)", flag, s, f)
		}
		if seen[g] {
			return nil, fmt.Errorf("%s %q: GPU %d is listed twice", flag, s, g)
		}
		seen[g] = true
		out = append(out, g)
	}
	return out, nil
}

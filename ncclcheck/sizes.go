package ncclcheck

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"dflash/dtype"
)

// ParseSizes reads a list of byte sizes: comma-separated items, each a size
// ("256M") or a geometric range FROM..TO[:FACTOR] ("4K..1G" is 4 KiB, 8 KiB,
// ..., 1 GiB; the factor defaults to 2). Suffixes K, M, G are powers of
// 1024 (KiB, MiB, GiB also accepted). The result is sorted and has no
// duplicates. Errors name the item.
func ParseSizes(s string) ([]int64, error) {
	var out []int64
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		from, to, ok := strings.Cut(item, "..")
		if !ok {
			n, err := parseSize(item)
			if err != nil {
				return nil, err
			}
			out = append(out, n)
			continue
		}
		factor := int64(2)
		if t, f, ok := strings.Cut(to, ":"); ok {
			to = t
			v, err := strconv.ParseInt(f, 10, 64)
			if err != nil || v < 2 {
				return nil, fmt.Errorf("size range %q: factor %q: want an integer of at least 2", item, f)
			}
			factor = v
		}
		lo, err := parseSize(from)
		if err != nil {
			return nil, fmt.Errorf("size range %q: %w", item, err)
		}
		hi, err := parseSize(to)
		if err != nil {
			return nil, fmt.Errorf("size range %q: %w", item, err)
		}
		if lo > hi {
			return nil, fmt.Errorf("size range %q: %s is larger than %s", item, from, to)
		}
		for n := lo; n <= hi; n *= factor {
			out = append(out, n)
			if n > hi/factor {
				break
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("sizes %q: no size given", s)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func parseSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "I")
	mult := int64(1)
	switch {
	case strings.HasSuffix(t, "K"):
		mult = 1 << 10
	case strings.HasSuffix(t, "M"):
		mult = 1 << 20
	case strings.HasSuffix(t, "G"):
		mult = 1 << 30
	}
	if mult > 1 {
		t = t[:len(t)-1]
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 || n > (1<<40)/mult {
		return 0, fmt.Errorf("size %q: want a positive byte count such as 4096, 4K, 256M or 1G", s)
	}
	return n * mult, nil
}

// ParseDTypes reads a comma-separated list of bf16 and f32 (any spelling
// dtype.Parse accepts, such as fp32 or float32).
func ParseDTypes(s string) ([]dtype.DType, error) {
	var out []dtype.DType
	for _, item := range strings.Split(s, ",") {
		if strings.TrimSpace(item) == "" {
			continue
		}
		t, err := dtype.ParseOneOf(item, dtype.BF16, dtype.F32)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("dtypes %q: none given", s)
	}
	return out, nil
}

// FormatBytes prints a size the way ParseSizes reads it: 4K, 256M, 1G, or
// bytes when not a whole number of KiB.
func FormatBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dG", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dK", n>>10)
	}
	return strconv.FormatInt(n, 10)
}

// AlgBW returns bytes/t in GB/s (1e9 bytes per second).
func AlgBW(bytes int64, t time.Duration) float64 {
	if t <= 0 {
		return 0
	}
	return float64(bytes) / t.Seconds() / 1e9
}

// BusBW returns NCCL's bus bandwidth of an all-reduce of bytes over nranks
// ranks taking t: AlgBW * 2(nranks-1)/nranks, in GB/s.
func BusBW(bytes int64, t time.Duration, nranks int) float64 {
	return AlgBW(bytes, t) * 2 * float64(nranks-1) / float64(nranks)
}

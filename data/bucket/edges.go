package bucket

import (
	"fmt"
	"slices"
)

// ChooseLens returns at most n bucket lengths, ascending, each a multiple of
// edge, the largest covering the longest sample, that minimise the padded
// tokens of the data set
//
//	padded = Σ_samples min{b ∈ lens : b ≥ length}
//
// Only rounded sample lengths ceil(l/edge)*edge can be optimal bucket lengths
// (lowering any other one to the next such length pads less), so an exact
// dynamic program runs over the m distinct rounded lengths v_1 < … < v_m with
// counts c_i:
//
//	f(1, i) = v_i · (c_1 + … + c_i)
//	f(j, i) = min_{p<i} f(j−1, p) + v_i · (c_{p+1} + … + c_i)
//
// and the answer is f(min(n, m), m), in O(n·m²) time. Ties go to the
// smallest split point, so the result is a pure function of the lengths.
// A length ≤ 0 or n < 1 is an error naming it.
func ChooseLens(lengths []int, edge, n int) ([]int, error) {
	if edge <= 0 {
		return nil, fmt.Errorf("bucket: edge must be positive, got %d", edge)
	}
	if n < 1 {
		return nil, fmt.Errorf("bucket: number of buckets must be at least 1, got %d", n)
	}
	vals, counts, err := histogram(lengths, edge)
	if err != nil {
		return nil, err
	}
	m := len(vals)
	k := min(n, m)
	if k == m {
		return vals, nil
	}
	// cum[i] = c_1 + … + c_i (1-based, cum[0] = 0).
	cum := make([]int64, m+1)
	for i, c := range counts {
		cum[i+1] = cum[i] + int64(c)
	}
	// f[j][i]: least padded tokens of samples 1..i with j buckets, the
	// last at v_i; from[j][i]: the split point p of that minimum.
	f := make([][]int64, k+1)
	from := make([][]int, k+1)
	for j := range f {
		f[j] = make([]int64, m+1)
		from[j] = make([]int, m+1)
	}
	const inf = int64(1) << 62
	for i := 1; i <= m; i++ {
		f[1][i] = int64(vals[i-1]) * cum[i]
	}
	for j := 2; j <= k; j++ {
		for i := 1; i <= m; i++ {
			f[j][i] = inf
			for p := j - 1; p < i; p++ {
				if c := f[j-1][p] + int64(vals[i-1])*(cum[i]-cum[p]); c < f[j][i] {
					f[j][i], from[j][i] = c, p
				}
			}
		}
	}
	lens := make([]int, k)
	for j, i := k, m; j >= 1; j-- {
		lens[j-1] = vals[i-1]
		i = from[j][i]
	}
	return lens, nil
}

// histogram returns the distinct rounded lengths ceil(l/edge)*edge,
// ascending, and how many samples have each.
func histogram(lengths []int, edge int) (vals, counts []int, err error) {
	count := map[int]int{}
	for i, l := range lengths {
		if l <= 0 {
			return nil, nil, fmt.Errorf("bucket: sample %d has length %d", i, l)
		}
		count[RoundUp(l, edge)]++
	}
	for v := range count {
		vals = append(vals, v)
	}
	slices.Sort(vals)
	counts = make([]int, len(vals))
	for i, v := range vals {
		counts[i] = count[v]
	}
	return vals, counts, nil
}

// RoundUp returns l rounded up to a multiple of edge: ceil(l/edge)*edge.
func RoundUp(l, edge int) int { return (l + edge - 1) / edge * edge }

// PaddedTokens returns Σ_samples min{b ∈ lens : b ≥ length}, the tokens of
// the data set padded to the ascending bucket lengths lens; ok is false when
// a sample is longer than every bucket.
func PaddedTokens(lengths, lens []int) (padded int64, ok bool) {
	for _, l := range lengths {
		i, _ := slices.BinarySearch(lens, l)
		if i == len(lens) {
			return 0, false
		}
		padded += int64(lens[i])
	}
	return padded, true
}

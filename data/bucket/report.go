package bucket

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// BucketStats describes one bucket over an epoch.
type BucketStats struct {
	Len     int   `json:"len"`
	Samples int   `json:"samples"`
	Batches int   `json:"batches"`
	Tokens  int64 `json:"tokens"` // real tokens
	Padded  int64 `json:"padded"` // tokens after padding to Len
}

// Report is the padding cost of an epoch.
type Report struct {
	Buckets []BucketStats `json:"buckets"`
	Samples int           `json:"samples"`
	Batches int           `json:"batches"`
	Tokens  int64         `json:"tokens"`
	Padded  int64         `json:"padded"`
	// Waste is the padded fraction: 1 - Tokens/Padded.
	Waste float64 `json:"waste"`
	// WasteUnbucketed is the waste of padding every sample to the longest
	// (rounded up to Edge), for comparison.
	WasteUnbucketed float64 `json:"waste_unbucketed"`
	// BudgetUse is Padded / (Batches x TokenBudget).
	BudgetUse float64 `json:"budget_use"`
}

// Report computes the padding cost of epoch 0 (every epoch has the same).
func (s *Sampler) Report() Report {
	var r Report
	byLen := map[int]*BucketStats{}
	for _, b := range s.edges {
		r.Buckets = append(r.Buckets, BucketStats{Len: b})
	}
	for i := range r.Buckets {
		byLen[r.Buckets[i].Len] = &r.Buckets[i]
	}
	longest := 0
	for _, b := range s.Plan(0) {
		st := byLen[b.Len]
		st.Batches++
		st.Samples += len(b.Indices)
		st.Padded += int64(b.Len * len(b.Indices))
		for _, i := range b.Indices {
			st.Tokens += int64(s.lengths[i])
			longest = max(longest, s.lengths[i])
		}
	}
	for _, st := range r.Buckets {
		r.Samples += st.Samples
		r.Batches += st.Batches
		r.Tokens += st.Tokens
		r.Padded += st.Padded
	}
	if r.Padded > 0 {
		r.Waste = 1 - float64(r.Tokens)/float64(r.Padded)
		r.WasteUnbucketed = 1 - float64(r.Tokens)/float64(int64(r.Samples)*int64(s.BucketLen(longest)))
		r.BudgetUse = float64(r.Padded) / (float64(r.Batches) * float64(s.cfg.TokenBudget))
	}
	return r
}

// Print writes the report as a table.
func (r Report) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "bucket\tsamples\tbatches\ttokens\tpadded\twaste\t\n")
	for _, b := range r.Buckets {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%.1f%%\t\n", b.Len, b.Samples, b.Batches, b.Tokens, b.Padded, 100*(1-float64(b.Tokens)/float64(max(b.Padded, 1))))
	}
	fmt.Fprintf(tw, "all\t%d\t%d\t%d\t%d\t%.1f%%\t\n", r.Samples, r.Batches, r.Tokens, r.Padded, 100*r.Waste)
	tw.Flush()
	fmt.Fprintf(w, "padding waste %.1f%% (padding all to the longest: %.1f%%); batches use %.1f%% of the token budget\n",
		100*r.Waste, 100*r.WasteUnbucketed, 100*r.BudgetUse)
}

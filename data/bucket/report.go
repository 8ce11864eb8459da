package bucket

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// BucketStats describes one bucket over an epoch.
type BucketStats struct {
	Len     int   `json:"len"`
	Rows    int   `json:"rows"` // rows of a full batch
	Samples int   `json:"samples"`
	Batches int   `json:"batches"`
	Tokens  int64 `json:"tokens"` // real tokens
	Padded  int64 `json:"padded"` // tokens after padding to Len (and empty rows with PadRows)
	// Waste is the bucket's padded fraction: 1 - Tokens/Padded.
	Waste float64 `json:"waste"`
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
	for _, b := range s.lens {
		r.Buckets = append(r.Buckets, BucketStats{Len: b, Rows: s.BatchSize(b)})
	}
	for i := range r.Buckets {
		byLen[r.Buckets[i].Len] = &r.Buckets[i]
	}
	longest := 0
	for _, b := range s.Plan(0) {
		st := byLen[b.Len]
		st.Batches++
		st.Samples += len(b.Indices)
		st.Padded += int64(b.Len * b.Rows)
		for _, i := range b.Indices {
			st.Tokens += int64(s.lengths[i])
			longest = max(longest, s.lengths[i])
		}
	}
	for i := range r.Buckets {
		st := &r.Buckets[i]
		st.Waste = waste(st.Tokens, st.Padded)
		r.Samples += st.Samples
		r.Batches += st.Batches
		r.Tokens += st.Tokens
		r.Padded += st.Padded
	}
	if r.Padded > 0 {
		r.Waste = waste(r.Tokens, r.Padded)
		r.WasteUnbucketed = 1 - float64(r.Tokens)/float64(int64(r.Samples)*int64(s.BucketLen(longest)))
		r.BudgetUse = float64(r.Padded) / (float64(r.Batches) * float64(s.cfg.TokenBudget))
	}
	return r
}

// waste returns 1 - tokens/padded (0 when nothing is padded).
func waste(tokens, padded int64) float64 {
	if padded == 0 {
		return 0
	}
	return 1 - float64(tokens)/float64(padded)
}

// Print writes the report as a table.
func (r Report) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "bucket\trows\tsamples\tbatches\ttokens\tpadded\twaste\t\n")
	for _, b := range r.Buckets {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%.1f%%\t\n", b.Len, b.Rows, b.Samples, b.Batches, b.Tokens, b.Padded, 100*b.Waste)
	}
	fmt.Fprintf(tw, "all\t\t%d\t%d\t%d\t%d\t%.1f%%\t\n", r.Samples, r.Batches, r.Tokens, r.Padded, 100*r.Waste)
	tw.Flush()
	fmt.Fprintf(w, "padding waste %.1f%% (padding all to the longest: %.1f%%); batches use %.1f%% of the token budget\n",
		100*r.Waste, 100*r.WasteUnbucketed, 100*r.BudgetUse)
}

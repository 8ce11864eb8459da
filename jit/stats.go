package jit

import (
	"fmt"
	"io"
	"sort"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

type counters struct {
	memoryHits, errorHits, waits        atomic.Int64
	diskHits, diskDiscarded             atomic.Int64
	diskReadErrors, diskWriteErrors     atomic.Int64
	diskWrites                          atomic.Int64
	compiles, compileErrors             atomic.Int64
	moduleLoads, functionHits           atomic.Int64
	compileNS, diskLoadNS, moduleLoadNS atomic.Int64
}

// Stats is a snapshot of a cache's counters.
type Stats struct {
	MemoryHits      int64 // Gets served by the memory tier (including waits for a compile in flight)
	Waits           int64 // of those, Gets that waited for another goroutine's compile
	ErrorHits       int64 // Gets answered with a cached compile error
	DiskHits        int64 // keys loaded from disk
	DiskDiscarded   int64 // corrupt, truncated or foreign files deleted and rebuilt
	DiskReadErrors  int64 // files that could not be read (I/O errors)
	DiskWrites      int64 // images written to disk
	DiskWriteErrors int64
	Compiles        int64 // compiler runs (successful or not)
	CompileErrors   int64 // compiler runs that failed
	ModuleLoads     int64 // module loads into device contexts
	FunctionHits    int64 // function handles served from the per-device tier
	CompileTime     time.Duration
	DiskLoadTime    time.Duration
	ModuleLoadTime  time.Duration
	Kernels         int            // keys in memory
	Families        map[string]int // distinct keys per family in this process
}

// Stats returns the cache's counters.
func (c *Cache) Stats() Stats {
	s := &c.stats
	st := Stats{
		MemoryHits: s.memoryHits.Load(), Waits: s.waits.Load(), ErrorHits: s.errorHits.Load(),
		DiskHits: s.diskHits.Load(), DiskDiscarded: s.diskDiscarded.Load(), DiskReadErrors: s.diskReadErrors.Load(),
		DiskWrites: s.diskWrites.Load(), DiskWriteErrors: s.diskWriteErrors.Load(),
		Compiles: s.compiles.Load(), CompileErrors: s.compileErrors.Load(),
		ModuleLoads: s.moduleLoads.Load(), FunctionHits: s.functionHits.Load(),
		CompileTime: time.Duration(s.compileNS.Load()), DiskLoadTime: time.Duration(s.diskLoadNS.Load()),
		ModuleLoadTime: time.Duration(s.moduleLoadNS.Load()),
	}
	c.mu.RLock()
	st.Kernels = len(c.byKey)
	c.mu.RUnlock()
	st.Families = c.budget.counts()
	return st
}

// WriteTable prints the stats as an aligned two-column table.
func (s Stats) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
	rows := [][2]string{
		{"kernels in memory", fmt.Sprint(s.Kernels)},
		{"memory hits", fmt.Sprintf("%d (%d waited for a compile in flight)", s.MemoryHits, s.Waits)},
		{"cached compile errors served", fmt.Sprint(s.ErrorHits)},
		{"disk hits", fmt.Sprintf("%d (%s loading)", s.DiskHits, ms(s.DiskLoadTime))},
		{"compiles", fmt.Sprintf("%d (%d failed, %s compiling)", s.Compiles, s.CompileErrors, ms(s.CompileTime))},
		{"disk writes", fmt.Sprintf("%d (%d failed)", s.DiskWrites, s.DiskWriteErrors)},
		{"disk files discarded", fmt.Sprintf("%d (%d read errors)", s.DiskDiscarded, s.DiskReadErrors)},
		{"module loads", fmt.Sprintf("%d (%s)", s.ModuleLoads, ms(s.ModuleLoadTime))},
		{"function handle hits", fmt.Sprint(s.FunctionHits)},
	}
	fams := make([]string, 0, len(s.Families))
	for f := range s.Families {
		fams = append(fams, f)
	}
	sort.Strings(fams)
	for _, f := range fams {
		rows = append(rows, [2]string{"family " + f, fmt.Sprintf("%d kernels", s.Families[f])})
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	return tw.Flush()
}

package flex

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// workerCount returns the number of goroutines to use for n tasks:
// min(n, GOMAXPROCS), at least 1.
func workerCount(n int) int {
	return max(1, min(n, runtime.GOMAXPROCS(0)))
}

// parallelFor calls fn(w, i) for every i in [0, n) on workers goroutines;
// w in [0, workers) identifies the goroutine so callers can keep per-worker
// scratch. Tasks are handed out dynamically, in order.
func parallelFor(n, workers int, fn func(w, i int)) {
	if n == 0 {
		return
	}
	if workers <= 1 {
		for i := 0; i < n; i++ {
			fn(0, i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(w, i)
			}
		}(w)
	}
	wg.Wait()
}

package stepbench

import (
	"bufio"
	"bytes"
	"os"
	"runtime/metrics"
	"strconv"
	"sync"
	"time"
)

// The runtime/metrics names of the bytes of heap objects (live and not yet
// swept) and of the heap marked live by the last GC.
const (
	heapObjects = "/memory/classes/heap/objects:bytes"
	heapLive    = "/gc/heap/live:bytes"
)

// heapPeak tracks the Go heap's high-water marks: a goroutine samples them
// every period, and mark samples them at once (phase boundaries).
type heapPeak struct {
	mu         sync.Mutex
	peak, live uint64
	sample     []metrics.Sample
	stop       chan struct{}
	done       chan struct{}
}

// startHeapPeak starts sampling every period until stop.
func startHeapPeak(period time.Duration) *heapPeak {
	h := &heapPeak{sample: []metrics.Sample{{Name: heapObjects}, {Name: heapLive}}, stop: make(chan struct{}), done: make(chan struct{})}
	h.mark()
	go func() {
		defer close(h.done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-t.C:
				h.mark()
			}
		}
	}()
	return h
}

// mark samples the heap now.
func (h *heapPeak) mark() {
	h.mu.Lock()
	defer h.mu.Unlock()
	metrics.Read(h.sample)
	h.peak = max(h.peak, h.sample[0].Value.Uint64())
	h.live = max(h.live, h.sample[1].Value.Uint64())
}

// finish stops sampling and returns the peaks in bytes: of the heap, and of
// the heap marked live.
func (h *heapPeak) finish() (peak, live uint64) {
	close(h.stop)
	<-h.done
	h.mark()
	return h.peak, h.live
}

// peakRSS returns the process's resident high-water mark (VmHWM in
// /proc/self/status), 0 where that file is missing.
func peakRSS() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := bytes.Fields(sc.Bytes())
		if len(fs) == 3 && string(fs[0]) == "VmHWM:" && string(fs[2]) == "kB" {
			n, err := strconv.ParseUint(string(fs[1]), 10, 64)
			if err != nil {
				return 0
			}
			return n << 10
		}
	}
	return 0
}

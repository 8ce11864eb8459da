package cuda

import "unsafe"

// CaptureMode is a CUstreamCaptureMode.
type CaptureMode int32

// Stream capture modes. dflash captures in thread-local mode: only the
// capturing thread is barred from unsafe calls, so other workers run freely.
const (
	CaptureModeGlobal      CaptureMode = 0
	CaptureModeThreadLocal CaptureMode = 1
	CaptureModeRelaxed     CaptureMode = 2
)

// StreamBeginCapture starts capturing the work queued on s into a graph.
func StreamBeginCapture(s Stream, mode CaptureMode) error {
	return drv(pStreamBeginCapture, uintptr(s), uintptr(mode))
}

// StreamEndCapture ends the capture on s and returns the captured graph.
func StreamEndCapture(s Stream) (Graph, error) {
	var g uintptr
	err := drv(pStreamEndCapture, uintptr(s), uintptr(unsafe.Pointer(&g)))
	return Graph(g), err
}

// GraphInstantiate makes an executable graph from g.
func GraphInstantiate(g Graph) (GraphExec, error) {
	var e uintptr
	err := drv(pGraphInstantiate, uintptr(unsafe.Pointer(&e)), uintptr(g), 0)
	return GraphExec(e), err
}

// GraphLaunch queues one replay of e on s.
func GraphLaunch(e GraphExec, s Stream) error { return drv(pGraphLaunch, uintptr(e), uintptr(s)) }

// GraphExecDestroy destroys an executable graph.
func GraphExecDestroy(e GraphExec) error { return drv(pGraphExecDestroy, uintptr(e)) }

// GraphDestroy destroys a graph.
func GraphDestroy(g Graph) error { return drv(pGraphDestroy, uintptr(g)) }

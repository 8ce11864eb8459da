package gpu

import (
	"errors"
	"fmt"

	"dflash/cuda"
)

// ErrNotOwner is returned when a graph is used off the worker that captured it.
var ErrNotOwner = errors.New("gpu: CUDA graph used by a worker that did not capture it")

// Graph is a captured and instantiated CUDA graph. It belongs to the worker
// that captured it: Launch from any other thread fails with ErrNotOwner.
type Graph struct {
	d    *Device
	g    cuda.Graph
	exec cuda.GraphExec
}

// Capture records the work that record queues on s (the default stream when
// nil) into a graph, in thread-local capture mode: only this worker's thread
// is barred from capture-unsafe calls while it runs, other workers go on.
// Nothing record queues runs until the graph is launched.
func (d *Device) Capture(s *Stream, record func(s *Stream) error) (*Graph, error) {
	if err := d.check("Capture"); err != nil {
		return nil, err
	}
	s = d.stream(s)
	if err := cuda.StreamBeginCapture(s.h, cuda.CaptureModeThreadLocal); err != nil {
		return nil, err
	}
	d.capturing = true
	recErr := record(s)
	d.capturing = false
	g, endErr := cuda.StreamEndCapture(s.h)
	if recErr != nil || endErr != nil {
		var destroyErr error
		if g != 0 {
			destroyErr = cuda.GraphDestroy(g)
		}
		return nil, fmt.Errorf("gpu %d: capture: %w", d.info.Ordinal, errors.Join(recErr, endErr, destroyErr))
	}
	exec, err := cuda.GraphInstantiate(g)
	if err != nil {
		return nil, errors.Join(err, cuda.GraphDestroy(g))
	}
	gr := &Graph{d: d, g: g, exec: exec}
	d.graphs[gr] = struct{}{}
	return gr, nil
}

// owned reports ErrNotOwner unless called on the capturing worker's thread.
func (g *Graph) owned(call string) error {
	if tid := gettid(); tid != 0 && tid != g.d.w.tid {
		return fmt.Errorf("%w: %s on OS thread %d, graph of gpu %d captured on thread %d",
			ErrNotOwner, call, tid, g.d.info.Ordinal, g.d.w.tid)
	}
	return nil
}

// Launch replays the graph on s (the device's default stream when nil).
func (g *Graph) Launch(s *Stream) error {
	if err := g.owned("Graph.Launch"); err != nil {
		return err
	}
	if g.exec == 0 {
		return fmt.Errorf("gpu %d: launch of a destroyed graph", g.d.info.Ordinal)
	}
	g.d.launched()
	return cuda.GraphLaunch(g.exec, g.d.stream(s).h)
}

// Destroy frees the graph.
func (g *Graph) Destroy() error {
	if err := g.owned("Graph.Destroy"); err != nil {
		return err
	}
	delete(g.d.graphs, g)
	return g.destroy()
}

func (g *Graph) destroy() error {
	if g.exec == 0 {
		return nil
	}
	err := errors.Join(cuda.GraphExecDestroy(g.exec), cuda.GraphDestroy(g.g))
	g.exec, g.g = 0, 0
	return err
}

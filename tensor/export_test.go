package tensor

// Released reports whether t's storage was given back by its tape
// (ReleaseGrads), for the tests of package tensor_test.
func Released[T Float](t *Of[T]) bool { return t.buf != nil && t.buf.freed }

// Evicted reports whether t's storage is given back to be recomputed
// (Recompute), for the tests of package tensor_test.
func Evicted[T Float](t *Of[T]) bool { return t.buf != nil && t.buf.redo != nil && t.buf.redo.evicted }

package tensor

// Released reports whether t's storage was given back by its tape
// (ReleaseGrads), for the tests of package tensor_test.
func Released[T Float](t *Of[T]) bool { return t.buf != nil && t.buf.freed }

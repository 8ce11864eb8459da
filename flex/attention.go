package flex

// Grads are the gradients returned by Backward: DQ like q, DK and DV like k
// and v, and Tensors the gradients of the float tensors the score program
// reads, by name, each shaped like its tensor.
type Grads[T float32 | float64] struct {
	DQ, DK, DV []T
	Tensors    map[string][]T
}

//go:build !amd64

package tensor

func fastKernel[T Float]() (microKernel[T], bool) { return microKernel[T]{}, false }

// Package ceil rounds integer quotients up: the number of blocks, tiles or
// threads that cover a length.
package ceil

// Div returns ⌈a/b⌉ for a ≥ 0 and b > 0: the number of blocks of b that
// cover a elements.
func Div(a, b int) int { return (a + b - 1) / b }

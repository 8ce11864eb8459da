//go:build !unix

package shard

// processAlive cannot tell here, so every writer counts as alive and no
// temporary directory is removed.
func processAlive(pid int) bool { return true }

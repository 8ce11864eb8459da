//go:build !race

package flex

const raceEnabled = false

//go:build race

package rls

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// allocation counts are only checked without it (make test runs the Alloc
// tests again without -race).
const raceEnabled = true

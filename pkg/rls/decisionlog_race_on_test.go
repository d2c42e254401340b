//go:build race

package rls

// decisionLogRace: the race detector makes sync.Pool drop items at random,
// so allocation counts are not comparable under it.
const decisionLogRace = true

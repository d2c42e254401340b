//go:build !race

package refstats

const raceEnabled = false

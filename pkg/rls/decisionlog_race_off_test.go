//go:build !race

package rls

// decisionLogRace: see decisionlog_race_on_test.go.
const decisionLogRace = false

package rules

import (
	"strings"
	"testing"
)

func TestWriteRLConfig(t *testing.T) {
	s := mustSnapshot(t, map[string]string{
		"b.yaml": `
domain: b
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit: {unit: second, requests_per_unit: 5}
      - key: subkey1
        value: subvalue1
        shadow_mode: true
        rate_limit: {unit: second, requests_per_unit: 10}
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20, warmup: {period: 10m, from: 0.25, start: "2026-12-24T10:00:00Z"}}
  - key: open
    rate_limit: {unlimited: true}
  - key: many
    rate_limits:
      - {unit: hour, requests_per_unit: 1, warmup: {period: 90s}}
      - {unit: day, unit_multiplier: 2, requests_per_unit: 7, algorithm: gcra}
`,
		"a.yaml": `
domain: a
descriptors:
  - key: wild
    value: foo*bar
    rate_limit: {unit: week, requests_per_unit: 3}
`,
	})
	want := strings.Join([]string{
		"a.wild_foo*bar: unit=WEEK requests_per_unit=3, shadow_mode: false",
		"b.key1_value1.subkey1: unit=SECOND requests_per_unit=5, shadow_mode: false",
		"b.key1_value1.subkey1_subvalue1: unit=SECOND requests_per_unit=10, shadow_mode: true",
		"b.key2: unit=MINUTE requests_per_unit=20, shadow_mode: false, warmup: period=10m0s from=0.25 start=2026-12-24T10:00:00Z",
		"b.open: unit=UNKNOWN requests_per_unit=0, shadow_mode: false",
		"b.many: unit=HOUR requests_per_unit=1, shadow_mode: false, warmup: period=1m30s from=0.3333333333333333",
		"b.many: unit=DAY requests_per_unit=7, shadow_mode: false",
	}, "\n") + "\n"
	var b strings.Builder
	if err := s.WriteRLConfig(&b); err != nil {
		t.Fatalf("WriteRLConfig: %v", err)
	}
	if b.String() != want {
		t.Errorf("WriteRLConfig wrote\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	var nilSnap *Snapshot
	if err := nilSnap.WriteRLConfig(&b); err != nil || b.Len() != 0 {
		t.Errorf("nil snapshot wrote %q, %v; want nothing", b.String(), err)
	}
}

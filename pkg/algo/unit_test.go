package algo

import (
	"errors"
	"strings"
	"testing"
)

func TestUnits(t *testing.T) {
	tests := []struct {
		name  string
		unit  Unit
		envoy string
		us    int64
	}{
		{"second", UnitSecond, "SECOND", Second},
		{"minute", UnitMinute, "MINUTE", 60 * Second},
		{"hour", UnitHour, "HOUR", 3600 * Second},
		{"day", UnitDay, "DAY", 86400 * Second},
		{"week", UnitWeek, "WEEK", 7 * 86400 * Second},
		{"month", UnitMonth, "MONTH", 30 * 86400 * Second},
		{"year", UnitYear, "YEAR", 365 * 86400 * Second},
	}
	if len(tests) != len(Units) {
		t.Fatalf("table has %d units, Units %d", len(tests), len(Units))
	}
	var names []string
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if Units[i] != tt.unit {
				t.Errorf("Units[%d] = %v, want %v (shortest first)", i, Units[i], tt.unit)
			}
			if !tt.unit.Valid() || tt.unit.String() != tt.name || tt.unit.EnvoyName() != tt.envoy || tt.unit.Micros() != tt.us {
				t.Errorf("%d: valid %v, String %q, EnvoyName %q, Micros %d; want %q, %q, %d",
					tt.unit, tt.unit.Valid(), tt.unit.String(), tt.unit.EnvoyName(), tt.unit.Micros(), tt.name, tt.envoy, tt.us)
			}
			if u, err := ParseUnit(tt.name); err != nil || u != tt.unit {
				t.Errorf("ParseUnit(%q) = %v, %v", tt.name, u, err)
			}
		})
		names = append(names, tt.name)
	}
	if got, want := UnitNames(), strings.Join(names, "|"); got != want {
		t.Errorf("UnitNames() = %q, want %q", got, want)
	}
}

func TestBadUnits(t *testing.T) {
	for _, u := range []Unit{0, UnitYear + 1, 255} {
		if u.Valid() || u.Micros() != 0 || u.String() == "" {
			t.Errorf("unit %d: Valid %v, Micros %d, String %q; want invalid, 0 and a name", u, u.Valid(), u.Micros(), u.String())
		}
	}
	for _, s := range []string{"", "Minute", "MINUTE", "minutes", "fortnight"} {
		_, err := ParseUnit(s)
		if !errors.Is(err, ErrUnknownUnit) || !strings.Contains(err.Error(), "(want "+UnitNames()+")") {
			t.Errorf("ParseUnit(%q) = %v, want ErrUnknownUnit listing %s", s, err, UnitNames())
		}
	}
}

func TestAlgorithmNames(t *testing.T) {
	const want = "fixed_window|sliding_window|sliding_log|token_bucket|gcra"
	if got := AlgorithmNames(); got != want {
		t.Errorf("AlgorithmNames() = %q, want %q", got, want)
	}
	for _, name := range strings.Split(want, "|") {
		if a, err := ParseAlgorithm(name); err != nil || a.String() != name {
			t.Errorf("ParseAlgorithm(%q) = %v, %v", name, a, err)
		}
	}
	_, err := ParseAlgorithm("leaky_bucket")
	if !errors.Is(err, ErrUnknownAlgorithm) || !strings.HasSuffix(err.Error(), "(want "+want+")") {
		t.Errorf("ParseAlgorithm(leaky_bucket) = %v, want ErrUnknownAlgorithm listing %s", err, want)
	}
}

func TestValidateSlidingLogCap(t *testing.T) {
	tests := []struct {
		cap int64
		ok  bool
	}{
		{-1, false}, {0, false}, {1, true}, {DefaultSlidingLogCap, true}, {MaxSlidingLogCap, true}, {MaxSlidingLogCap + 1, false},
	}
	for _, tt := range tests {
		err := ValidateSlidingLogCap(tt.cap)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateSlidingLogCap(%d) = %v, want ok=%v", tt.cap, err, tt.ok)
			continue
		}
		// Policies reject a bad cap in the same words.
		perr := Policy{Algorithm: FixedWindow, Limit: 1, Period: Second}.ValidateWithLogCap(tt.cap)
		if !tt.ok && (perr == nil || !strings.HasSuffix(perr.Error(), strings.TrimPrefix(err.Error(), "algo: "))) {
			t.Errorf("ValidateWithLogCap(%d) = %v, want it to end like %q", tt.cap, perr, err)
		}
	}
}

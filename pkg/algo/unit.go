package algo

import (
	"errors"
	"fmt"
	"strings"
)

// Microseconds per unit, as Envoy defines its units (month = 30 days,
// year = 365 days).
const (
	Second int64 = 1_000_000
	Minute       = 60 * Second
	Hour         = 60 * Minute
	Day          = 24 * Hour
	Week         = 7 * Day
	Month        = 30 * Day
	Year         = 365 * Day
)

// Unit is the unit a limit's period is counted in: a rule's unit, which
// responses report back. The zero value is no unit.
type Unit uint8

// Units, shortest first.
const (
	UnitSecond Unit = iota + 1
	UnitMinute
	UnitHour
	UnitDay
	UnitWeek
	UnitMonth
	UnitYear
)

// units is the one table of units: the configuration name (Envoy names the
// unit in upper case) and the length in microseconds.
var units = [...]struct {
	name string
	us   int64
}{
	UnitSecond: {"second", Second},
	UnitMinute: {"minute", Minute},
	UnitHour:   {"hour", Hour},
	UnitDay:    {"day", Day},
	UnitWeek:   {"week", Week},
	UnitMonth:  {"month", Month},
	UnitYear:   {"year", Year},
}

// Units lists every unit, shortest first.
var Units = []Unit{UnitSecond, UnitMinute, UnitHour, UnitDay, UnitWeek, UnitMonth, UnitYear}

// Valid reports whether u is one of Units.
func (u Unit) Valid() bool { return u >= UnitSecond && int(u) < len(units) }

// String returns the configuration name of u, e.g. "minute".
func (u Unit) String() string {
	if u.Valid() {
		return units[u].name
	}
	return fmt.Sprintf("unit(%d)", uint8(u))
}

// EnvoyName returns the name Envoy's unit enums give u, e.g. "MINUTE".
func (u Unit) EnvoyName() string { return strings.ToUpper(u.String()) }

// Micros returns the length of one u in microseconds, 0 for an invalid unit.
func (u Unit) Micros() int64 {
	if u.Valid() {
		return units[u].us
	}
	return 0
}

// ErrUnknownUnit is returned by ParseUnit for a name it does not know.
var ErrUnknownUnit = errors.New("unknown unit")

// ParseUnit returns the Unit whose configuration name is s ("minute").
func ParseUnit(s string) (Unit, error) { return parseName(Units, s, ErrUnknownUnit) }

// UnitNames returns the configuration names of Units joined with "|"
// ("second|minute|…"), the form error messages list them in.
func UnitNames() string { return joinNames(Units) }

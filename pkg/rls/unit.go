package rls

import (
	"strings"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// envoyUnits is the one map between algo's units and Envoy's two unit
// enums: the response's, which has every unit, and envoy.type.v3's, which
// a descriptor's limit override names and which has no WEEK. The two enums
// happen to share numbers; this table does not rely on it.
var envoyUnits = [...]struct {
	unit     algo.Unit
	response pb.RateLimitResponse_RateLimit_Unit
	// override is RateLimitUnit_UNKNOWN where an override cannot name unit.
	override typev3.RateLimitUnit
}{
	{algo.UnitSecond, pb.RateLimitResponse_RateLimit_SECOND, typev3.RateLimitUnit_SECOND},
	{algo.UnitMinute, pb.RateLimitResponse_RateLimit_MINUTE, typev3.RateLimitUnit_MINUTE},
	{algo.UnitHour, pb.RateLimitResponse_RateLimit_HOUR, typev3.RateLimitUnit_HOUR},
	{algo.UnitDay, pb.RateLimitResponse_RateLimit_DAY, typev3.RateLimitUnit_DAY},
	{algo.UnitWeek, pb.RateLimitResponse_RateLimit_WEEK, typev3.RateLimitUnit_UNKNOWN},
	{algo.UnitMonth, pb.RateLimitResponse_RateLimit_MONTH, typev3.RateLimitUnit_MONTH},
	{algo.UnitYear, pb.RateLimitResponse_RateLimit_YEAR, typev3.RateLimitUnit_YEAR},
}

// responseUnit returns the enum a status reports u as.
func responseUnit(u algo.Unit) pb.RateLimitResponse_RateLimit_Unit {
	for _, e := range envoyUnits {
		if e.unit == u {
			return e.response
		}
	}
	return pb.RateLimitResponse_RateLimit_UNKNOWN
}

// overrideUnit returns the unit a limit override names, ok false when it
// names none that a limit can have.
func overrideUnit(u typev3.RateLimitUnit) (algo.Unit, bool) {
	if u == typev3.RateLimitUnit_UNKNOWN {
		return 0, false
	}
	for _, e := range envoyUnits {
		if e.override == u {
			return e.unit, true
		}
	}
	return 0, false
}

// overrideUnitNames lists the units an override may name, "SECOND|…|YEAR",
// for error messages.
func overrideUnitNames() string {
	var names []string
	for _, e := range envoyUnits {
		if e.override != typev3.RateLimitUnit_UNKNOWN {
			names = append(names, e.unit.EnvoyName())
		}
	}
	return strings.Join(names, "|")
}

// Package adaptive scales rate limits from Prometheus signals (CPU,
// latency, error rate): each controller, opt-in per limit, checks its
// PromQL queries every interval, cuts the limit's factor multiplicatively
// when any signal is above its high mark, raises it additively when all
// are below their low marks, and holds it in between (hysteresis), within
// a floor and a ceiling and no more often than a minimum interval. It
// writes the factor as an "adaptive" override through pkg/override, so
// operators see it in `envoy-rls override list` and pin a limit by setting
// a manual override, which suspends the controller for that limit.
//
// It must not touch counters or rules: its only effect is the override it
// writes. A failed, empty or NaN query leaves the factor where it is.
package adaptive

import (
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"sigs.k8s.io/yaml"
)

// File is the controller file (--adaptive-config):
//
//	interval: 30s            # how often every controller checks its signals
//	controllers:
//	  - domain: api
//	    limit: per_user      # as an override addresses it (pkg/override Target)
//	    signals:
//	      - name: cpu
//	        query: avg(rate(process_cpu_seconds_total[1m]))
//	        high: 0.8        # above: decrease
//	        low: 0.5         # below (every signal): increase
//	    decrease: 0.8        # factor × 0.8 (default)
//	    increase: 0.1        # factor + 0.1 (default)
//	    floor: 0.2           # default 0.1
//	    ceiling: 1           # default 1
//	    min_interval: 1m     # least time between two changes (default: interval)
//	    ttl: 10m             # lifetime of the written factor (default 10 × interval, at least 1m)
type File struct {
	Interval    string       `json:"interval"`
	Controllers []Controller `json:"controllers"`

	interval time.Duration
}

// Controller is one limit's controller in the file.
type Controller struct {
	Domain      string   `json:"domain"`
	Limit       string   `json:"limit"`
	Signals     []Signal `json:"signals"`
	Decrease    float64  `json:"decrease"`
	Increase    float64  `json:"increase"`
	Floor       float64  `json:"floor"`
	Ceiling     float64  `json:"ceiling"`
	MinInterval string   `json:"min_interval"`
	TTL         string   `json:"ttl"`

	minInterval, ttl time.Duration
}

// Signal is one PromQL query and its marks; low must be at most high.
type Signal struct {
	Name  string  `json:"name"`
	Query string  `json:"query"`
	High  float64 `json:"high"`
	Low   float64 `json:"low"`
}

// Defaults of a controller's fields.
const (
	DefaultInterval = 30 * time.Second
	defaultDecrease = 0.8
	defaultIncrease = 0.1
	defaultFloor    = 0.1
	defaultCeiling  = 1.0
)

// LoadFile reads and checks a controller file, listing every problem with
// its path.
func LoadFile(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("adaptive: %w", err)
	}
	return Parse(path, b)
}

// Parse decodes a controller file (unknown fields are errors), fills the
// defaults and checks it.
func Parse(name string, data []byte) (*File, error) {
	var f File
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("adaptive: %s: %w", name, err)
	}
	var errs []error
	bad := func(path, format string, a ...any) {
		errs = append(errs, fmt.Errorf("adaptive: %s: %s: %s", name, path, fmt.Sprintf(format, a...)))
	}
	interval := duration(f.Interval, DefaultInterval, "interval", bad)
	if len(f.Controllers) == 0 {
		bad("controllers", "empty (want at least one controller)")
	}
	seen := map[[2]string]int{}
	for i := range f.Controllers {
		c := &f.Controllers[i]
		p := fmt.Sprintf("controllers[%d]", i)
		if c.Domain == "" || c.Limit == "" {
			bad(p, "domain and limit are required (the limit as an override names it)")
		}
		if j, dup := seen[[2]string{c.Domain, c.Limit}]; dup {
			bad(p, "same domain and limit as controllers[%d] (want one controller per limit)", j)
		}
		seen[[2]string{c.Domain, c.Limit}] = i
		c.minInterval = duration(c.MinInterval, interval, p+".min_interval", bad)
		c.ttl = duration(c.TTL, max(10*interval, time.Minute), p+".ttl", bad)
		c.Decrease = orDefault(c.Decrease, defaultDecrease)
		c.Increase = orDefault(c.Increase, defaultIncrease)
		c.Floor = orDefault(c.Floor, defaultFloor)
		c.Ceiling = orDefault(c.Ceiling, defaultCeiling)
		if !(c.Decrease > 0 && c.Decrease < 1) {
			bad(p+".decrease", "%v (want above 0 and below 1: the factor is multiplied by it)", c.Decrease)
		}
		if !(c.Increase > 0 && c.Increase <= 10) {
			bad(p+".increase", "%v (want above 0 and at most 10: it is added to the factor)", c.Increase)
		}
		if !(c.Floor > 0 && c.Floor <= c.Ceiling && c.Ceiling <= 100) {
			bad(p, "floor %v, ceiling %v (want 0 < floor <= ceiling <= 100)", c.Floor, c.Ceiling)
		}
		if len(c.Signals) == 0 {
			bad(p+".signals", "empty (want at least one PromQL signal)")
		}
		for j, s := range c.Signals {
			sp := fmt.Sprintf("%s.signals[%d]", p, j)
			if s.Query == "" {
				bad(sp+".query", "empty (want a PromQL expression giving one number)")
			}
			if math.IsNaN(s.High) || math.IsNaN(s.Low) || s.Low > s.High {
				bad(sp, "low %v above high %v (want low <= high; between them the factor holds)", s.Low, s.High)
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	f.interval = interval
	return &f, nil
}

func orDefault(v, def float64) float64 {
	if v == 0 {
		return def
	}
	return v
}

// duration parses s, or returns def when s is empty; a bad or non-positive
// value is reported through bad.
func duration(s string, def time.Duration, path string, bad func(path, format string, a ...any)) time.Duration {
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		bad(path, "%q (want a positive duration such as 30s)", s)
		return def
	}
	return d
}

package rls

import (
	"io"
	"reflect"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestDecisionLog: at debug level each decision is one line with the
// domain, the overall code and, per descriptor, its entries (each part cut
// to maxLoggedValue bytes), the rule (its name, else file:line) and code.
func TestDecisionLog(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	s, _ := newTestService(t, twoRules, func(c *Config) { c.Logger = zap.New(core) })
	long := strings.Repeat("v", 100)
	req := request("d", desc("a="+long), desc("b=x"), desc("c=nothing"))
	call(t, s, req)
	call(t, s, req) // b's limit is 1: now over

	lines := logs.FilterMessage("decision").All()
	if len(lines) != 2 {
		t.Fatalf("%d decision lines, want one per request", len(lines))
	}
	got := lines[1].ContextMap()
	want := map[string]any{
		"domain": "d",
		"code":   "OVER_LIMIT",
		"descriptors": []any{
			map[string]any{"entries": []any{"a=" + long[:maxLoggedValue] + "…(100 bytes)"}, "rule": "test.yaml:4", "code": "OK"},
			map[string]any{"entries": []any{"b=x"}, "rule": "bee", "code": "OVER_LIMIT"},
			map[string]any{"entries": []any{"c=nothing"}, "rule": "none", "code": "OK"},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decision line\n got %#v\nwant %#v", got, want)
	}
}

// TestDecisionLogAllocsNothingWhenOff: with the logger above debug,
// logging a decision allocates nothing.
func TestDecisionLogAllocsNothingWhenOff(t *testing.T) {
	info := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zapcore.InfoLevel))
	s, _ := newTestService(t, twoRules, func(c *Config) { c.Logger = info })
	req := request("d", desc("a=1"), desc("b=2"))
	snap := mustSnapshot(t, twoRules)
	p := new(plan)
	if err := p.build(req, snap, true, overrideRules{}, nil); err != nil {
		t.Fatal(err)
	}
	resp := p.response(req, false, HeaderOptions{})
	if n := testing.AllocsPerRun(100, func() { s.logDecision(req, resp, p) }); n != 0 && !decisionLogRace {
		t.Errorf("logging a decision at info level allocates %.1f times, want 0", n)
	}
}

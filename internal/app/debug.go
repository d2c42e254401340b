package app

import (
	"context"
	"io"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/admin"
	"github.com/envoy-rls/envoy-rls/pkg/explain"
	"github.com/envoy-rls/envoy-rls/pkg/override"
	"github.com/envoy-rls/envoy-rls/pkg/rlqs"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// handlers gathers what the servers serve: the service, the readiness
// check (the rule source's first config, then the backend's Ready), and
// the debug listener's pages and console. The deployment's Redis key
// prefix is what /debug/explain shows in key names.
func (a *App) handlers(c Config) handlers {
	rulesNow := a.rules.current
	keyPrefix, cfg := c.Backend.Stack.KeyPrefix, c.Servers
	h := handlers{
		svc:  a.svc,
		rlqs: a.rlqs,
		ready: func(ctx context.Context) error {
			if err := a.rules.ready(ctx); err != nil {
				return err
			}
			return a.backend.stack.Ready(ctx)
		},
		debug: admin.DebugOptions{
			Config:   func() any { return a.debugConfig(rulesNow()) },
			RLConfig: func(w io.Writer) error { return rulesNow().WriteRLConfig(w) },
			Pprof:    cfg.Pprof,
			Explain: explain.Handler(&explain.Explainer{
				Rules:         rulesNow,
				Effective:     a.svc.EffectiveLimit,
				KeyPrefix:     keyPrefix,
				CounterHashes: c.Backend.Stack.CounterHashes,
				Peeker:        a.backend.stack,
				Quotas:        a.rlqsQuotas,
			}),
			Admin:          override.Handler(a.backend.overrides, rulesNow),
			AdminTokenFile: cfg.AdminTokenFile,
		},
	}
	if a.console != nil {
		h.debug.Console = a.consoleHandler(c, h.debug)
	}
	return h
}

// debugPage is /debug/config: the loaded rules, with each limit's
// effective value, and under "limits" every limit's effective value and
// its source (configured, overridden or adjusted).
type debugPage struct {
	rules.View
	Limits []override.LimitView `json:"limits"`
	// RLQS is every bucket's last assignment per Envoy instance connected
	// to this replica (pkg/rlqs).
	RLQS []rlqs.Assignment `json:"rlqs_assignments,omitempty"`
}

// debugConfig builds /debug/config for snap.
func (a *App) debugConfig(snap *rules.Snapshot) any {
	return debugPage{
		View: snap.Dump(a.svc.CurrentLimit),
		Limits: a.backend.overrides.Describe(snap, time.Now(), func(now time.Time, domain string, r *rules.Rule, l *rules.Limit) uint32 {
			return a.svc.EffectiveLimit(now, domain, r, l).RequestsPerUnit
		}),
		RLQS: a.rlqs.Assignments(),
	}
}

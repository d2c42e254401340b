package explain

import (
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// onLimit names what l does with a request over it, and its max_delay in
// ms when it queues.
func onLimit(l *rules.Limit) (mode string, maxDelayMS float64) {
	if l.MaxDelay <= 0 {
		return "deny", 0
	}
	return "delay", float64(l.MaxDelay) / float64(time.Millisecond)
}

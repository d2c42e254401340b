package e2e

import (
	"sync"
	"testing"
	"time"
)

// Hang guards of the traffic helpers; nothing asserts on durations.
const (
	waitTimeout  = 30 * time.Second
	trafficLimit = 4000 // requests one traffic loop sends at most
	trafficPause = 5 * time.Millisecond
)

// traffic is a bounded client loop sending one request through Envoy
// until stopped (or trafficLimit requests, or waitTimeout × 4).
type traffic struct {
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	answers []answer
}

func (s *stack) startTraffic(r request) *traffic {
	tr := &traffic{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(tr.done)
		deadline := time.Now().Add(4 * waitTimeout)
		for range trafficLimit {
			a := s.do(r)
			tr.mu.Lock()
			tr.answers = append(tr.answers, a)
			tr.mu.Unlock()
			select {
			case <-tr.stop:
				return
			case <-time.After(trafficPause):
			}
			if time.Now().After(deadline) {
				return
			}
		}
	}()
	return tr
}

// Stop ends the loop and returns every answer it saw, in order.
func (tr *traffic) Stop() []answer {
	close(tr.stop)
	<-tr.done
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]answer(nil), tr.answers...)
}

// Len is the number of answers so far.
func (tr *traffic) Len() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.answers)
}

// waitFor polls cond until it holds, failing t (naming what) after
// waitTimeout.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// statusCounts counts answers by status; transport errors count as 0.
func statusCounts(answers []answer) map[int]int {
	n := map[int]int{}
	for _, a := range answers {
		if a.Err != nil {
			n[0]++
			continue
		}
		n[a.Status]++
	}
	return n
}

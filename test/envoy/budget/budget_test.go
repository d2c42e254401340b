package budget

import (
	"fmt"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/eventually"
	"github.com/envoy-rls/envoy-rls/internal/rlsproc"
)

// inFlight is how many requests of one client can be in flight, counted
// from its admission until its stream-done charge has landed: Envoy sends
// that charge once the response is done, after the client has it, so the
// client's next request may be admitted before it lands. Two (the request
// at the upstream and the previous one's charge on its way) holds while
// the charge's call takes less than a request (each is held holdMS by the
// upstream).
const inFlight = 2

// holdMS is how long the upstream holds each answer.
const holdMS = 50

// sizes are the responses' token counts the clients ask for, in turn;
// maxSize is the largest.
var sizes = []int64{20, 35, 50, 65, 80, 45, 30, 75}

const maxSize = 80

// subWindows is sliding_window's default number of sub-windows.
const subWindows = 30

// traffic is what a run's clients send.
type traffic struct {
	// URLs are the Envoys' listeners; client i uses URLs[i % len].
	URLs    []string
	Path    string
	Header  map[string]string
	Clients int
	// DelayMS holds each answer in the upstream, so requests overlap.
	DelayMS int
	// Estimate, when set, gives each request's x-max-tokens figure from
	// its real size (the reservation pattern).
	Estimate func(size int64) int64
	// PerClient bounds each client's requests.
	PerClient int
}

// burst runs the clients concurrently; each sends requests of sizes (its
// own rotation) until it is answered 429, or PerClient requests. It is
// safe to call from any goroutine; check vets its answers.
func (tr traffic) burst() []call {
	var (
		mu  sync.Mutex
		out []call
		wg  sync.WaitGroup
	)
	for c := range tr.Clients {
		wg.Go(func() {
			url := tr.URLs[c%len(tr.URLs)] + tr.Path
			for i := range tr.PerClient {
				size := sizes[(c*3+i)%len(sizes)]
				var est int64
				if tr.Estimate != nil {
					est = tr.Estimate(size)
				}
				r := ask(url, tr.Header, size, est, tr.DelayMS)
				mu.Lock()
				out = append(out, r)
				mu.Unlock()
				if r.Err != nil || r.Status != http.StatusOK {
					return
				}
			}
		})
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].Sent.Before(out[j].Sent) })
	return out
}

// check fails t on a transport error or any status but 200 and 429.
func check(t *testing.T, calls []call) {
	t.Helper()
	for _, r := range calls {
		if r.Err != nil || (r.Status != http.StatusOK && r.Status != http.StatusTooManyRequests) {
			t.Fatalf("a client got %d (%v), want only 200 and 429", r.Status, r.Err)
		}
	}
}

// tally sums calls: requests, admitted ones, and the tokens admitted.
func tally(calls []call) (requests, admitted int, tokens int64) {
	for _, c := range calls {
		requests++
		if c.Status == http.StatusOK {
			admitted++
			tokens += c.Tokens
		}
	}
	return requests, admitted, tokens
}

// model is what a budget must do, worked out from the algorithm's
// definition (docs/algorithms.md), with no timing assumption: for a time
// t, whether every request must then be denied, and from when one must
// pass again, given all the hits charged (total) between first and
// landed.
type model struct {
	b      budget
	period time.Duration
}

func newModel(b budget) model {
	return model{b: b, period: time.Duration(b.PeriodSec) * time.Second}
}

// rate is a token bucket's refill in tokens per second.
func (m model) rate() float64 { return float64(m.b.Tokens) / m.period.Seconds() }

func trunc(t time.Time, d time.Duration) time.Time {
	return time.Unix(0, t.UnixNano()-t.UnixNano()%int64(d))
}

// refill is the most a token bucket refilled between first and last.
func (m model) refill(first, last time.Time) int64 {
	if m.b.Algorithm != "token_bucket" {
		return 0
	}
	return int64(m.rate()*last.Sub(first).Seconds()) + 1
}

// mustDeny: at t, with total charged since first, no request may pass.
func (m model) mustDeny(t, first time.Time, total int64) bool {
	switch m.b.Algorithm {
	case "fixed_window":
		return total >= m.b.Tokens && t.Before(trunc(first, m.period).Add(m.period))
	case "sliding_window":
		// Hits count in full while their sub-window is inside the period.
		return total >= m.b.Tokens && t.Before(trunc(first, m.period/subWindows).Add(m.period))
	case "token_bucket":
		// The bucket holds at most max(B − total, −B) + rate·(t − first):
		// its debt is at most one capacity deep.
		return float64(max(m.b.Tokens-total, -m.b.Tokens))+m.rate()*t.Sub(first).Seconds() < 1
	}
	panic(m.b.Algorithm)
}

// paidBack is when a one-hit request must pass again, the last hit
// having landed at landed.
func (m model) paidBack(first, landed time.Time, total int64) time.Time {
	const margin = 150 * time.Millisecond
	switch m.b.Algorithm {
	case "fixed_window":
		return trunc(landed, m.period).Add(m.period + margin)
	case "sliding_window":
		sub := m.period / subWindows
		return trunc(landed, sub).Add(m.period + sub + margin)
	case "token_bucket":
		// The bucket holds at least max(B − total, −B) + rate·(t − landed).
		debt := min(total-m.b.Tokens, m.b.Tokens)
		return landed.Add(time.Duration(float64(debt+1)/m.rate()*float64(time.Second)) + margin)
	}
	panic(m.b.Algorithm)
}

// budgetRun is one shape's run on one budget and what it measured.
type budgetRun struct {
	Shape    shape
	Budget   budget
	Calls    []call
	Charged  int64 // every hit sent: request-time hits and admitted tokens
	Tokens   int64 // tokens admitted (the responses that got 200)
	Admitted int
	Bound    int64 // B + refill + maxSize × clients × inFlight
}

// rlsCalls is the RLS calls all replicas answered so far.
func rlsCalls(t testing.TB, rls []*rlsproc.Proc) int {
	n := 0.0
	for _, p := range rls {
		n += metric(t, p.HTTPAddr, "envoy_rls_requests_total")
	}
	return int(n)
}

// waitLanded waits until the replicas have answered want calls in all:
// the request-path calls and every stream-done charge. It returns the
// time when they had.
func waitLanded(t *testing.T, rls []*rlsproc.Proc, want int) time.Time {
	t.Helper()
	eventually.True(t, "every stream-done charge reaches envoy-rls", func() (bool, string) {
		got := rlsCalls(t, rls)
		return got >= want, fmt.Sprintf("%d calls, want %d", got, want)
	})
	return time.Now()
}

// callsOf is the calls the replicas get for calls: one on the request
// path for each, and a stream-done one for each admitted request (a 429
// reports no usage, so its stream-done descriptor is dropped and no call
// is made).
func callsOf(calls []call) int {
	requests, admitted, _ := tally(calls)
	return requests + admitted
}

// measure checks a run's calls against the bound (tokens admitted at most
// B + refill + the largest response × the requests in flight) and that the budget was
// spent (at least B charged, a request denied).
func measure(t *testing.T, sh shape, b budget, clients int, calls []call) budgetRun {
	t.Helper()
	check(t, calls)
	requests, admitted, tokens := tally(calls)
	m := newModel(b)
	run := budgetRun{Shape: sh, Budget: b, Calls: calls, Tokens: tokens, Admitted: admitted,
		Charged: tokens + int64(requests)*sh.RequestHits}
	run.Bound = b.Tokens + m.refill(calls[0].Sent, calls[len(calls)-1].Sent) + maxSize*int64(clients*inFlight)
	t.Logf("%s, %s, %d tokens per %ds, %d clients: %d requests, %d admitted, %d tokens admitted (%+d over the budget; bound %d), %d charged",
		sh.Name, b.Algorithm, b.Tokens, b.PeriodSec, clients, requests, admitted, tokens, tokens-b.Tokens, run.Bound, run.Charged)
	if tokens > run.Bound {
		t.Errorf("%s: %d tokens admitted, above the bound B + refill + largest response × requests in flight = %d", sh.Name, tokens, run.Bound)
	}
	if run.Charged < b.Tokens || admitted == requests {
		t.Errorf("%s: %d charged in %d requests (%d admitted): the budget of %d was never spent", sh.Name, run.Charged, requests, admitted, b.Tokens)
	}
	return run
}

// holdAndPayBack checks that, once the budget is spent, every request is
// denied while the model says it must be, and that one passes again once
// the window or the refill has paid the budget back.
func holdAndPayBack(t *testing.T, run budgetRun, tr traffic) {
	t.Helper()
	m := newModel(run.Budget)
	first := run.Calls[0].Sent
	total := run.Charged
	url := tr.URLs[0] + tr.Path
	asserted := 0
	for range 8 {
		c := ask(url, tr.Header, 1, 1, 0)
		if c.Err != nil {
			t.Error(c.Err)
			return
		}
		total += run.Shape.RequestHits
		if c.Status == http.StatusOK {
			total++ // its one token, charged at stream done
		}
		if !m.mustDeny(c.Sent, first, run.Charged) {
			continue
		}
		asserted++
		if c.Status != http.StatusTooManyRequests {
			t.Errorf("%s: a request after the budget was spent got %d, want 429", run.Shape.Name, c.Status)
		}
	}
	if asserted == 0 {
		t.Errorf("%s: no request of the hold phase fell where the budget must deny (the machine too slow for a %ds period?)", run.Shape.Name, run.Budget.PeriodSec)
	}
	at := m.paidBack(first, time.Now(), total)
	time.Sleep(time.Until(at))
	c := ask(url, tr.Header, 1, 1, 0)
	if c.Err != nil || c.Status != http.StatusOK {
		t.Errorf("%s: once the budget was paid back, a request got %d (%v), want 200", run.Shape.Name, c.Status, c.Err)
	}
	t.Logf("%s, %s: %d of 8 requests after the budget was spent fell where it must deny, and were; %v after the first request, one passed again",
		run.Shape.Name, run.Budget.Algorithm, asserted, c.Sent.Sub(first).Round(10*time.Millisecond))
}

// awayFromEdge waits, for a fixed window, until just after a window
// starts, so that a run's burst and charges fall in one window.
func awayFromEdge(b budget) {
	if b.Algorithm != "fixed_window" {
		return
	}
	p := time.Duration(b.PeriodSec) * time.Second
	time.Sleep(time.Until(trunc(time.Now(), p).Add(p + 50*time.Millisecond)))
}

var algorithms = []string{"fixed_window", "sliding_window", "token_bucket"}

// TestBudgetThroughEnvoy: each product's shape, on each store and
// algorithm, through one Envoy and one envoy-rls: 4 concurrent clients on
// a budget of 600 tokens per 4 s admit at most 600 + 80 × 4 × inFlight
// tokens (80 the largest response), spend the budget, are all denied until
// the window or the refill pays it back, and are admitted again after.
func TestBudgetThroughEnvoy(t *testing.T) {
	for _, st := range []store{onMemory, onRedis} {
		for _, alg := range algorithms {
			t.Run(string(st)+"/"+alg, func(t *testing.T) {
				b := budget{Tokens: 600, PeriodSec: 4, Algorithm: alg}
				up := startLLM(t)
				rls := startRLS(t, shapesRules(b), addrOf(redisFor(t, st)))
				_, url := startEnvoy(t, "shapes", shapesBootstrap(), []string{rls.GRPCAddr}, up.Addr)
				rlss := []*rlsproc.Proc{rls}
				shapes := []shape{aiShape, egShape}
				trs := make([]traffic, len(shapes))
				for i, sh := range shapes {
					trs[i] = traffic{URLs: []string{url}, Path: sh.Path, Header: sh.Header(t.Name() + "-" + sh.Name),
						Clients: 4, DelayMS: holdMS, PerClient: 200}
				}
				before := rlsCalls(t, rlss)
				awayFromEdge(b)
				// Both shapes at once, each on its own budget.
				calls := make([][]call, len(shapes))
				var wg sync.WaitGroup
				for i := range shapes {
					wg.Go(func() { calls[i] = trs[i].burst() })
				}
				wg.Wait()
				want := before
				for i := range shapes {
					want += callsOf(calls[i])
				}
				waitLanded(t, rlss, want)
				runs := make([]budgetRun, len(shapes))
				for i, sh := range shapes {
					runs[i] = measure(t, sh, b, trs[i].Clients, calls[i])
				}
				if t.Failed() {
					return
				}
				for i := range runs {
					wg.Go(func() { holdAndPayBack(t, runs[i], trs[i]) })
				}
				wg.Wait()
			})
		}
	}
}

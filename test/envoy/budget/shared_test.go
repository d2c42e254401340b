package budget

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/redistest"
	"github.com/envoy-rls/envoy-rls/internal/rlsproc"
)

// The reservation pattern's shipped files.
const (
	exampleBootstrap = "examples/budget/envoy.yaml"
	exampleRules     = "examples/budget/config/llm.yaml"
)

// reservationRules are examples/budget/config/llm.yaml's descriptor with
// the test's budget: one per user, cost: charge.
func reservationRules(b budget) map[string]string {
	return map[string]string{"llm.yaml": `domain: llm
descriptors:
  - key: user
    rate_limit: ` + b.limitYAML() + `
`}
}

// exampleTimeout is the rate-limit filter's timeout in exampleBootstrap.
const exampleTimeout = "timeout: 0.25s"

// patientExample is exampleBootstrap with its filter's timeout raised to
// 5 s: on a loaded machine a call that outlasts 0.25 s would let a request
// through unmetered (failure_mode_deny: false), or lose a settlement, and
// the counts would no longer add up. The timeout is not what is tested.
func patientExample(t *testing.T) []byte {
	t.Helper()
	b := string(rlsproc.ReadRepoFile(t, exampleBootstrap))
	if strings.Count(b, exampleTimeout) != 1 {
		t.Fatalf("%s no longer has one %q: update patientExample", exampleBootstrap, exampleTimeout)
	}
	return []byte(strings.Replace(b, exampleTimeout, "timeout: 5s", 1))
}

// estimateErrors are how far each request's estimate is from its real
// size, in turn: mostly over (a max_tokens figure is a ceiling), up to
// maxUnder under.
var estimateErrors = []int64{30, -10, 10, 0, 20, -5, 15, -10}

const maxUnder = 10

// estimator returns a request's estimate from its size, cycling through
// estimateErrors.
func estimator() func(int64) int64 {
	var mu sync.Mutex
	i := 0
	return func(size int64) int64 {
		mu.Lock()
		defer mu.Unlock()
		i++
		return max(1, size+estimateErrors[i%len(estimateErrors)])
	}
}

// counted sums every fixed-window counter in r: what the replicas counted
// in all.
func counted(t *testing.T, r *redistest.Server) int64 {
	t.Helper()
	ctx := context.Background()
	c := r.Client(t)
	// The counters' names start with the layout version; the
	// deployment's record of its layout (its counter-hash count) is
	// another hash, and no counter.
	keys, err := c.Keys(ctx, "r3{*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, k := range keys {
		if typ, _ := c.Type(ctx, k).Result(); typ != "hash" {
			continue
		}
		fields, err := c.HGetAll(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range fields {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("counter %s holds %q", k, v)
			}
			sum += n
		}
	}
	return sum
}

// awayFromHourEdge waits, when the next full hour is near, until it has
// passed, so that a run's charges fall in one hour's window.
func awayFromHourEdge() {
	now := time.Now()
	if next := now.Truncate(time.Hour).Add(time.Hour); next.Sub(now) < 30*time.Second {
		time.Sleep(time.Until(next) + time.Second)
	}
}

// pattern is one way of charging a budget, as the clients see it.
type pattern struct {
	Name      string
	Bootstrap func(t *testing.T) []byte
	// Listeners beside ingress that need a free port.
	Listeners []string
	Rules     func(b budget) map[string]string
	Path      string
	Header    func(run string) map[string]string
	// Estimator makes the estimate function of a run that reserves.
	Estimator func() func(int64) int64
	// RequestHits is what a request charges on the request path, and
	// Reserves whether it reserves its estimate there instead.
	RequestHits int64
	Reserves    bool
	// StreamDoneOnDeny: a 429 makes a stream-done call too (the
	// reservation's refund).
	StreamDoneOnDeny bool
	// Overshoot is the bound on tokens admitted beyond the budget.
	Overshoot func(clients int) int64
}

func chargeAfter(clients int) int64 { return maxSize * int64(clients*inFlight) }

var patterns = []pattern{
	{Name: "ai-gateway", Bootstrap: func(*testing.T) []byte { return shapesBootstrap() }, Rules: shapesRules,
		Path: aiPath, Header: aiShape.Header, RequestHits: 1, Overshoot: chargeAfter},
	{Name: "envoy-gateway", Bootstrap: func(*testing.T) []byte { return shapesBootstrap() }, Rules: shapesRules,
		Path: egPath, Header: egShape.Header, Overshoot: chargeAfter},
	{Name: "reservation", Bootstrap: patientExample,
		Listeners: []string{"model"}, Rules: reservationRules, Path: "/v1/chat/completions",
		Header:   func(run string) map[string]string { return map[string]string{"x-user-id": run} },
		Reserves: true, StreamDoneOnDeny: true, Estimator: estimator,
		Overshoot: func(clients int) int64 { return maxUnder * int64(clients*inFlight) }},
	// The same with every estimate maxUnder short: the worst case of the
	// bound, which the overshoot then approaches.
	{Name: "reservation-short", Bootstrap: patientExample,
		Listeners: []string{"model"}, Rules: reservationRules, Path: "/v1/chat/completions",
		Header:   func(run string) map[string]string { return map[string]string{"x-user-id": run} },
		Reserves: true, StreamDoneOnDeny: true,
		Estimator: func() func(int64) int64 { return func(size int64) int64 { return size - maxUnder } },
		Overshoot: func(clients int) int64 { return maxUnder * int64(clients*inFlight) }},
}

// TestSharedBudget: 8 concurrent clients on one budget of 1000 tokens an
// hour, through 4 Envoys, to 2 envoy-rls replicas on one Redis, for each
// algorithm and pattern: the AI Gateway's and Envoy Gateway's check then
// charge, which admit at most 1000 + 80 × 8 × inFlight tokens (80 the
// largest response), and the reservation pattern of examples/budget,
// which admits at most 1000 + 10 × 8 × inFlight (10 the largest amount by
// which an estimate falls short). Every pattern spends the budget, and every stream-done charge
// (and refund) was counted: on the fixed window Redis's counter equals what
// was charged, and on every algorithm the replicas' charged-hits metric
// equals what the check-then-charge shapes sent.
func TestSharedBudget(t *testing.T) {
	if data := string(rlsproc.ReadRepoFile(t, exampleRules)); !strings.Contains(data, "cost: charge") || !strings.Contains(data, "key: user") {
		t.Fatalf("%s no longer has the user budget with cost: charge that reservationRules copies", exampleRules)
	}
	for _, alg := range algorithms {
		for _, p := range patterns {
			t.Run(alg+"/"+p.Name, func(t *testing.T) { sharedRun(t, p, budget{Tokens: 1000, PeriodSec: 3600, Algorithm: alg}) })
		}
	}
}

// sharedRun is one pattern's run of TestSharedBudget on budget b.
func sharedRun(t *testing.T, p pattern, b budget) {
	t.Helper()
	const clients, envoys = 8, 4
	up := startLLM(t)
	red := redistest.Standalone(t)
	var rls []*rlsproc.Proc
	var addrs []string
	for range 2 {
		r := startRLS(t, p.Rules(b), red.Addr)
		rls, addrs = append(rls, r), append(addrs, r.GRPCAddr)
	}
	boot := p.Bootstrap(t)
	var urls []string
	for i := range envoys {
		_, url := startEnvoy(t, fmt.Sprintf("%s-%d", p.Name, i), boot, addrs, up.Addr, p.Listeners...)
		urls = append(urls, url)
	}
	tr := traffic{URLs: urls, Path: p.Path, Header: p.Header(strings.ReplaceAll(t.Name(), "/", "-")),
		Clients: clients, DelayMS: holdMS, PerClient: 200}
	if p.Reserves {
		tr.Estimate = p.Estimator()
	}
	before := rlsCalls(t, rls)
	awayFromHourEdge()
	calls := tr.burst()
	check(t, calls)
	requests, admitted, tokens := tally(calls)
	want := before + requests + admitted
	if p.StreamDoneOnDeny {
		want = before + 2*requests
	}
	waitLanded(t, rls, want)

	charged := tokens + int64(requests)*p.RequestHits
	over := tokens - b.Tokens
	bound := p.Overshoot(clients) + newModel(b).refill(calls[0].Sent, calls[len(calls)-1].Sent)
	t.Logf("%s, %s: %d tokens an hour, %d clients, %d Envoys, 2 replicas: %d requests, %d admitted, %d tokens admitted, overshoot %+d (bound %d), %d charged",
		p.Name, b.Algorithm, b.Tokens, clients, envoys, requests, admitted, tokens, over, bound, charged)
	if over > bound {
		t.Errorf("%d tokens admitted: %d over the budget, above the bound %d", tokens, over, bound)
	}
	if admitted == requests {
		t.Errorf("all %d requests admitted: the budget was never spent", requests)
	}
	// A fixed window's counters are plain integers in Redis: their
	// sum is every hit counted.
	if got := counted(t, red); b.Algorithm == "fixed_window" && got != charged {
		t.Errorf("Redis counted %d, want %d: every request-path hit, stream-done charge and refund (the upstream reported %d tokens in %d responses)",
			got, charged, tokens, admitted)
	}
	// On every algorithm the replicas' own count of the hits their
	// cost: charge limits took (refunds aside) is every hit sent.
	var took float64
	for _, r := range rls {
		took += metric(t, r.HTTPAddr, "envoy_rls_charged_hits_total")
	}
	if !p.Reserves && int64(took) != charged {
		t.Errorf("the replicas' envoy_rls_charged_hits_total is %v, want %d", took, charged)
	}
	if n, tok := up.totals(); int64(n) != int64(admitted) || tok != tokens {
		t.Errorf("the upstream served %d responses of %d tokens, the clients saw %d of %d", n, tok, admitted, tokens)
	}
	// The budget spent, the next request is denied: any request
	// with a charge after, one reserving more than is left with a
	// reservation (the settled counter is the real usage, so what
	// is left is exactly the budget less the tokens admitted).
	est := int64(1)
	if p.Reserves {
		est = max(1, b.Tokens-tokens+1+newModel(b).refill(calls[0].Sent, time.Now()))
	}
	if c := ask(urls[0]+p.Path, tr.Header, 1, est, 0); c.Err != nil || c.Status != http.StatusTooManyRequests {
		t.Errorf("after the budget was spent a request (estimate %d) got %d (%v), want 429", est, c.Status, c.Err)
	}
}

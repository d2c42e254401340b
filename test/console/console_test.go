// Package console drives the live console (/console on the debug
// listener) in a real headless Chromium, against the built envoy-rls
// binary on a real redis-server with bounded traffic running, as an
// operator would: the rules' live counts rise, a client pushed over its
// limit shows in the top list, explain answers a typed request, an
// override set from the page changes the next decision and goes when
// deleted, writes without the token are refused, and a descriptor value
// carrying HTML shows as text. At 1280x800 and 1920x1080 the first screen
// answers who is denied now (the denied summary, above the rules, with the
// limits that denied nothing folded) and the page does not scroll
// sideways. Each panel's screenshot, and the first screen's at both sizes,
// is saved into $CONSOLE_SCREENSHOTS (default: the test's temporary
// directory). docs/console.png comes from a demo run (demo.sh), not here.
//
// Chromium runs with the background-networking and update flags off and
// a new empty profile, so it reaches nothing but the loopback server.
// Nothing here imports the service's packages: the binary is a black box.
package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envoy-rls/envoy-rls/internal/testkit/childproc"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/envoy-rls/envoy-rls/internal/testkit/redistest"
	"github.com/envoy-rls/envoy-rls/internal/testkit/rlsproc"
)

// Hang guards: they only bound how long a broken build can stall a test;
// nothing asserts on durations.
const (
	waitTimeout = 30 * time.Second
	callTimeout = 10 * time.Second
	testTimeout = 4 * time.Minute
)

var binPath, chromiumPath string

func TestMain(m *testing.M) {
	rlsproc.Main(m, &binPath, func() (err error) {
		chromiumPath, err = findChromium()
		return err
	})
}

// findChromium finds Debian's chromium (make test-deps installs it), or
// $CHROMIUM_BIN. A missing browser fails the tests: they are never skipped.
func findChromium() (string, error) {
	return childproc.Tool{
		Name:    "chromium",
		Env:     "CHROMIUM_BIN",
		Path:    []string{"chromium", "chromium-browser"},
		Install: "run `make test-deps` (apt-get install chromium)",
	}.Find()
}

// rules: per_client denies the sixth request of a client in a minute; the
// paths limit never denies, and carries the background traffic.
const rules = `
domain: shop
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 5, name: per_client}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 100000, name: paths}
  - key: tokens
    rate_limit: {unit: hour, requests_per_unit: 100, name: token_budget, cost: charge}
`

// xssValue is a descriptor value that would run script if the page put it
// into HTML.
const xssValue = `<img src=x onerror=alert(1)>`

const (
	token   = "console-test-token"
	replica = "console-test-replica"
)

type server struct {
	debug string
	rls   pb.RateLimitServiceClient
	// rules is the watched rule directory.
	rules string
}

// startServer runs `envoy-rls serve` on redis with the debug listener and
// the admin token, and stops it at cleanup.
func startServer(t *testing.T, redisAddr string) *server {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// rlsproc starts it in its own process group, reads its addresses
	// from the serving line, waits for /readyz and kills it at cleanup.
	p := rlsproc.Start(t, binPath, []string{"serve", "--config-dir", dir, "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--debug-addr", "127.0.0.1:0", "--redis-url", "redis://" + redisAddr, "--redis-key-prefix", redistest.KeyPrefix(t),
		"--redis-timeout", "5s", "--admin-token-file", tokenFile, "--override-refresh", "200ms",
		"--console-replica", replica}, nil)
	grpcAddr, debugAddr := p.GRPCAddr, p.DebugAddr
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &server{debug: debugAddr, rls: pb.NewRateLimitServiceClient(conn), rules: dir}
}

// ask sends one request with one descriptor of key=value.
func (s *server) ask(t *testing.T, key, value string) pb.RateLimitResponse_Code {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	resp, err := s.rls.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}}}})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s=%s): %v", key, value, err)
	}
	return resp.GetOverallCode()
}

// traffic sends at most max requests on the paths limit, one every 20 ms,
// until stop; wait returns how many were answered and the calls that
// failed.
func (s *server) traffic(stop <-chan struct{}, max int) (wait func() (int64, []error)) {
	// Written by the goroutine only, read after wg.Wait.
	var sent int64
	var errs []error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range max {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			_, err := s.rls.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{
				{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "path", Value: fmt.Sprintf("/p%d", i%5)}}}}})
			cancel()
			if err != nil {
				errs = append(errs, err)
				continue
			}
			sent++
		}
	}()
	return func() (int64, []error) { wg.Wait(); return sent, errs }
}

// browser starts headless Chromium with a new empty profile and the flags
// that keep it off every network but loopback.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1100),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	// The first call starts the browser for the life of ctx, so it takes
	// no deadline; the later ones share the hang guard.
	if err := chromedp.Do(ctx); err != nil {
		cancelB()
		cancelA()
		t.Fatalf("start chromium: %v", err)
	}
	tctx, cancelT := context.WithTimeout(ctx, testTimeout)
	t.Cleanup(func() { cancelT(); cancelB(); cancelA() })
	return tctx
}

func run(t *testing.T, ctx context.Context, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatal(err)
	}
}

// eval returns the value of the JavaScript expression js in the page.
func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// setValue sets the value of the element sel selects, as typing would.
func setValue(sel, value string) chromedp.Action[chromedp.Void] {
	s, _ := json.Marshal(sel)
	v, _ := json.Marshal(value)
	return do(fmt.Sprintf("document.querySelector(%s).value = %s", s, v))
}

// do runs the JavaScript statement js in the page.
func do(js string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Evaluate[bool]("void ("+js+"), true")(ctx, tg)
		return err
	})
}

// waitJS polls the boolean expression js until it holds; the bound is a
// hang guard.
func waitJS(t *testing.T, ctx context.Context, what, js string) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		if eval[bool](t, ctx, js) {
			return time.Since(start)
		}
		if time.Since(start) > waitTimeout {
			t.Fatalf("%s: not true after %v: %s", what, waitTimeout, js)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// numberJS is the number in the element sel selects, or -1.
func numberJS(sel string) string {
	return fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e ? Number(e.textContent) : -1; })()`, sel)
}

// screenshot saves the element sel as name.png into the artifact directory.
func screenshot(t *testing.T, ctx context.Context, dir, name, sel string) {
	t.Helper()
	run(t, ctx, chromedp.ScrollIntoView(chromedp.CSS(sel)))
	png, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("screenshot %s: %v", sel, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestConsole(t *testing.T) {
	shots := os.Getenv("CONSOLE_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	redis := redistest.Standalone(t)
	s := startServer(t, redis.Addr)
	stop := make(chan struct{})
	sent := s.traffic(stop, 6000)
	defer func() {
		close(stop)
		n, errs := sent()
		if n == 0 {
			t.Error("the background traffic sent nothing")
		}
		if len(errs) > 0 {
			t.Errorf("%d background calls failed, the first: %v", len(errs), errs[0])
		}
	}()

	ctx := browser(t)
	var dialogs atomic.Int32
	if err := chromedp.Listen(ctx, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			dialogs.Add(1)
			// Listen's callback must not call the browser itself.
			go func() {
				_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
			}()
		}
	}); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, chromedp.Navigate("http://"+s.debug+"/console/"), chromedp.WaitVisible(chromedp.CSS("#panel-rules")))

	t.Run("replica", func(t *testing.T) {
		if got := eval[string](t, ctx, `document.getElementById('replica').textContent`); got != replica {
			t.Errorf("replica %q, want %q", got, replica)
		}
		if note := eval[string](t, ctx, `document.getElementById('replica-note').textContent`); !strings.Contains(note, "this replica's own traffic") {
			t.Errorf("the page does not say it shows this replica's own traffic: %q", note)
		}
	})

	t.Run("rules live counts rise", func(t *testing.T) {
		sel := `tr.limit-row[data-limit="paths"] .ok-total`
		waitJS(t, ctx, "paths has OK decisions", numberJS(sel)+` > 0`)
		first := eval[float64](t, ctx, numberJS(sel))
		waitJS(t, ctx, "paths' OK count rises", fmt.Sprintf(`%s > %v`, numberJS(sel), first))
		screenshot(t, ctx, shots, "1-rules", "#panel-rules")
	})

	t.Run("top limited clients", func(t *testing.T) {
		denied := 0
		for range 9 {
			if s.ask(t, "client", xssValue) == pb.RateLimitResponse_OVER_LIMIT {
				denied++
			}
		}
		if denied != 4 {
			t.Fatalf("%d of 9 requests denied, want 4 (limit 5 a minute)", denied)
		}
		s.ask(t, "client", "alice")
		want := "client=" + xssValue
		took := waitJS(t, ctx, "the denied client heads the top list", fmt.Sprintf(
			`(() => { const r = document.querySelector('.top-denied tr.top-denied-row'); return !!r && r.dataset.value === %q; })()`, want))
		t.Logf("the denied client showed in the top list %v after its denials (the page polls every second)", took.Round(time.Millisecond))
		count := eval[float64](t, ctx, `Number(document.querySelector('.top-denied tr.top-denied-row td.num').textContent)`)
		if count != 4 {
			t.Errorf("top-denied count %v, want 4", count)
		}
		// The rules panel counts the same denials, per second.
		waitJS(t, ctx, "per_client's over-limit count shows", numberJS(`tr.limit-row[data-limit="per_client"] .over-total`)+` >= 4`)
		screenshot(t, ctx, shots, "2-top", "#panel-top")
	})

	t.Run("html in a value renders as text", func(t *testing.T) {
		if n := eval[int](t, ctx, `document.querySelectorAll('img').length`); n != 0 {
			t.Errorf("%d img elements in the page: a value was parsed as HTML", n)
		}
		if !eval[bool](t, ctx, fmt.Sprintf(`document.getElementById('top').textContent.includes(%q)`, xssValue)) {
			t.Errorf("the value %q is not shown as text", xssValue)
		}
		if n := dialogs.Load(); n != 0 {
			t.Errorf("%d JavaScript dialogs opened: the value ran as script", n)
		}
	})

	t.Run("first screen: who is denied now", func(t *testing.T) {
		// per_client denied the HTML value above; paths carries traffic
		// and denies nothing.
		for _, size := range []struct{ w, h int64 }{{1280, 800}, {1920, 1080}} {
			name := fmt.Sprintf("%dx%d", size.w, size.h)
			run(t, ctx, chromedp.EmulateViewport(size.w, size.h), do(`window.scrollTo(0, 0)`))
			waitJS(t, ctx, name+": the denied summary lists per_client with its client", fmt.Sprintf(
				`[...document.querySelectorAll('#denied tr.denied-row[data-limit="per_client"] .client')].some((c) => c.dataset.value === %q)`, "client="+xssValue))
			waitJS(t, ctx, name+": paths, which denies nothing, is folded in the summary",
				`!!document.querySelector('#denied details.quiet li.quiet-row[data-limit="paths"]')`)
			fs := eval[firstScreen](t, ctx, firstScreenJS)
			if fs.InnerWidth != size.w || fs.InnerHeight != size.h {
				t.Fatalf("%s: viewport %dx%d", name, fs.InnerWidth, fs.InnerHeight)
			}
			if fs.DeniedRowTop < 0 || fs.DeniedRowBottom > float64(fs.InnerHeight) {
				t.Errorf("%s: per_client's denied row spans %v to %v px: not within the first screen (%d px high)", name, fs.DeniedRowTop, fs.DeniedRowBottom, fs.InnerHeight)
			}
			if fs.DeniedPanelTop >= fs.RulesPanelTop {
				t.Errorf("%s: the denied summary (top %v px) is not above the rules table (top %v px)", name, fs.DeniedPanelTop, fs.RulesPanelTop)
			}
			if fs.ScrollWidth > fs.ClientWidth {
				t.Errorf("%s: the page scrolls sideways: scrollWidth %d > clientWidth %d", name, fs.ScrollWidth, fs.ClientWidth)
			}
			if fs.QuietOpen {
				t.Errorf("%s: the limits that denied nothing are not folded in the summary", name)
			}
			if fs.TopPaths != "closed" || fs.TopPerClient != "open" {
				t.Errorf("%s: in the top panel paths is %s and per_client %s; want paths folded (closed) and per_client open", name, fs.TopPaths, fs.TopPerClient)
			}
			png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
			if err != nil {
				t.Fatalf("%s: screenshot: %v", name, err)
			}
			if err := os.WriteFile(filepath.Join(shots, "first-screen-"+name+".png"), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("explain", func(t *testing.T) {
		cases := []struct{ value, want string }{{xssValue, "OVER_LIMIT"}, {"carol", "OK"}}
		for _, tc := range cases {
			run(t, ctx,
				setValue("#explain-domain", "shop"),
				setValue("#explain-descriptors", "client="+tc.value),
				do(`document.getElementById('explain-result').replaceChildren()`),
				chromedp.Click(chromedp.CSS("#explain-submit")))
			waitJS(t, ctx, "explain answers", `!!document.querySelector('#explain-decision strong')`)
			if got := eval[string](t, ctx, `document.querySelector('#explain-decision strong').textContent`); got != tc.want {
				t.Errorf("explain client=%s: %q, want %q", tc.value, got, tc.want)
			}
		}
		if n := eval[int](t, ctx, `document.querySelectorAll('img').length`); n != 0 {
			t.Errorf("%d img elements after explaining the HTML value", n)
		}
		// A budget charged 150 of 100 (cost: charge) shows its overdraft.
		charge, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		if _, err := s.rls.ShouldRateLimit(charge, &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{
			{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "tokens", Value: "dave"}}, HitsAddend: wrapperspb.UInt64(150)}}}); err != nil {
			t.Fatalf("charge: %v", err)
		}
		run(t, ctx,
			setValue("#explain-domain", "shop"),
			setValue("#explain-descriptors", "tokens=dave"),
			do(`document.getElementById('explain-result').replaceChildren()`),
			chromedp.Click(chromedp.CSS("#explain-submit")))
		waitJS(t, ctx, "explain answers", `!!document.querySelector('#explain-decision strong')`)
		if got := eval[string](t, ctx, `document.getElementById('explain-result').textContent`); !strings.Contains(got, "overdrawn by 50") || !strings.Contains(got, "cost: charge") {
			t.Errorf("explain of a budget charged 150 of 100: %q, want it overdrawn by 50 and its cost named", got)
		}
		screenshot(t, ctx, shots, "3-explain", "#panel-explain")
	})

	t.Run("overrides", func(t *testing.T) {
		if got := s.ask(t, "client", "erin"); got != pb.RateLimitResponse_OK {
			t.Fatalf("client=erin before the override: %v, want OK", got)
		}
		fill := func(tok string) {
			run(t, ctx,
				setValue("#override-token", tok),
				setValue("#override-domain", "shop"),
				setValue("#override-limit", "per_client"),
				setValue("#override-factor", ""),
				setValue("#override-rpu", "0"),
				setValue("#override-ttl", "5m"),
				setValue("#override-reason", "console test"),
				do(`document.getElementById('override-msg').textContent = ''`),
				chromedp.Click(chromedp.CSS("#override-submit")))
			waitJS(t, ctx, "the override form answers", `document.getElementById('override-msg').textContent !== ''`)
		}
		// Without the token, the write is refused and nothing changes.
		fill("")
		if msg := eval[string](t, ctx, `document.getElementById('override-msg').textContent`); !strings.Contains(msg, "Refused: 401") {
			t.Errorf("set without the token: %q, want refused with 401", msg)
		}
		if got := s.ask(t, "client", "erin"); got != pb.RateLimitResponse_OK {
			t.Errorf("client=erin after a refused override: %v, want OK", got)
		}
		// With it, the override shows and blocks the next request.
		fill(token)
		if msg := eval[string](t, ctx, `document.getElementById('override-msg').textContent`); !strings.HasPrefix(msg, "Override set") {
			t.Fatalf("set with the token: %q", msg)
		}
		waitJS(t, ctx, "the override is listed", `!!document.querySelector('tr.override-row[data-limit="per_client"]')`)
		waitDecision(t, s, "erin", pb.RateLimitResponse_OVER_LIMIT)
		screenshot(t, ctx, shots, "4-overrides", "#panel-overrides")
		// Deleting without the token is refused too.
		run(t, ctx, setValue("#override-token", ""),
			do(`document.getElementById('override-msg').textContent = ''`),
			chromedp.Click(chromedp.CSS(`tr.override-row[data-limit="per_client"] .override-delete`)))
		waitJS(t, ctx, "the delete answers", `document.getElementById('override-msg').textContent !== ''`)
		if msg := eval[string](t, ctx, `document.getElementById('override-msg').textContent`); !strings.Contains(msg, "Refused: 401") {
			t.Errorf("delete without the token: %q, want refused with 401", msg)
		}
		if got := s.ask(t, "client", "frank"); got != pb.RateLimitResponse_OVER_LIMIT {
			t.Errorf("client=frank after a refused delete: %v, want OVER_LIMIT (the override stays)", got)
		}
		// With the token it goes, and requests pass again.
		run(t, ctx, setValue("#override-token", token),
			chromedp.Click(chromedp.CSS(`tr.override-row[data-limit="per_client"] .override-delete`)))
		waitJS(t, ctx, "the override is gone from the page", `!document.querySelector('tr.override-row[data-limit="per_client"]')`)
		waitDecision(t, s, "grace", pb.RateLimitResponse_OK)
	})

	t.Run("writes need the CSRF token", func(t *testing.T) {
		// The admin token alone does not make a cross-site write: the
		// console's own write path also wants the page's CSRF token.
		for _, tc := range []struct {
			name   string
			header map[string]string
		}{
			{name: "no CSRF token", header: map[string]string{"Authorization": "Bearer " + token}},
			{name: "cross-site", header: map[string]string{"Authorization": "Bearer " + token, "Sec-Fetch-Site": "cross-site", "X-Console-CSRF": "x"}},
			{name: "other origin", header: map[string]string{"Authorization": "Bearer " + token, "Origin": "http://evil.example", "X-Console-CSRF": "x"}},
		} {
			req, err := http.NewRequest(http.MethodPost, "http://"+s.debug+"/console/api/overrides",
				strings.NewReader(`{"domain":"shop","limit":"per_client","requests_per_unit":0,"ttl":"5m","reason":"csrf"}`))
			if err != nil {
				t.Fatal(err)
			}
			req.AddCookie(&http.Cookie{Name: "envoy_rls_console_csrf", Value: "x"})
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			resp, err := (&http.Client{Timeout: callTimeout}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden {
				t.Errorf("%s: HTTP %d, want 403", tc.name, resp.StatusCode)
			}
		}
		if got := s.ask(t, "client", "heidi"); got != pb.RateLimitResponse_OK {
			t.Errorf("client=heidi after refused writes: %v, want OK", got)
		}
	})

	t.Run("backend health", func(t *testing.T) {
		waitJS(t, ctx, "health shows the store", `document.getElementById('health').textContent.includes('redis (standalone)')`)
		waitJS(t, ctx, "health shows the master's round trip", fmt.Sprintf(
			`(() => { const r = document.querySelector('tr.shard-row'); return !!r && r.textContent.includes(%q) && r.textContent.includes('round trip'); })()`, redis.Addr))
		if !eval[bool](t, ctx, `document.getElementById('health').textContent.includes('closed')`) {
			t.Error("health does not show the breaker closed")
		}
		screenshot(t, ctx, shots, "5-health", "#panel-health")
	})

	t.Run("security headers", func(t *testing.T) {
		resp, err := (&http.Client{Timeout: callTimeout}).Get("http://" + s.debug + "/console/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		csp := resp.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("Content-Security-Policy %q", csp)
		}
		if got := resp.Header.Get("X-Frame-Options"); got != "DENY" {
			t.Errorf("X-Frame-Options %q, want DENY", got)
		}
		if n := eval[int](t, ctx, `[...document.scripts].filter(s => !s.src).length`); n != 0 {
			t.Errorf("%d inline scripts", n)
		}
	})
	t.Run("a failed reload shows with its place", func(t *testing.T) {
		bad := "domain: shop2\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"
		if err := os.WriteFile(filepath.Join(s.rules, "bad.yaml"), []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		waitJS(t, ctx, "the source shows the error", `document.getElementById('source').textContent.includes('Last error')`)
		src := eval[string](t, ctx, `document.getElementById('source').textContent`)
		for _, want := range []string{"bad.yaml:4", "unit", "fortnight", "1 failed"} {
			if !strings.Contains(src, want) {
				t.Errorf("the rule source panel does not show %q: %s", want, src)
			}
		}
		// The last good rules keep serving.
		if got := s.ask(t, "client", "ivan"); got != pb.RateLimitResponse_OK {
			t.Errorf("client=ivan after a failed reload: %v, want OK", got)
		}
		screenshot(t, ctx, shots, "1-rules-reload-error", "#panel-rules")
	})
	full, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shots, "console.png"), full, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots in %s", shots)
}

// firstScreen is where the page puts things in the viewport, in CSS
// pixels from the viewport's top, and how its details elements stand.
type firstScreen struct {
	InnerWidth      int64   `json:"innerWidth"`
	InnerHeight     int64   `json:"innerHeight"`
	ScrollWidth     int64   `json:"scrollWidth"`
	ClientWidth     int64   `json:"clientWidth"`
	DeniedPanelTop  float64 `json:"deniedPanelTop"`
	RulesPanelTop   float64 `json:"rulesPanelTop"`
	DeniedRowTop    float64 `json:"deniedRowTop"`
	DeniedRowBottom float64 `json:"deniedRowBottom"`
	QuietOpen       bool    `json:"quietOpen"`
	// TopPaths and TopPerClient are "open", "closed" or "missing": the
	// top panel's details element of each limit.
	TopPaths     string `json:"topPaths"`
	TopPerClient string `json:"topPerClient"`
}

const firstScreenJS = `(() => {
  const rect = (sel) => document.querySelector(sel).getBoundingClientRect();
  const state = (sel) => { const d = document.querySelector(sel); return !d ? 'missing' : d.open ? 'open' : 'closed'; };
  const row = rect('#denied tr.denied-row[data-limit="per_client"]');
  return {
    innerWidth: window.innerWidth, innerHeight: window.innerHeight,
    scrollWidth: document.documentElement.scrollWidth, clientWidth: document.documentElement.clientWidth,
    deniedPanelTop: rect('#panel-denied').top, rulesPanelTop: rect('#panel-rules').top,
    deniedRowTop: row.top, deniedRowBottom: row.bottom,
    quietOpen: document.querySelector('#denied details.quiet').open,
    topPaths: state('#top details.top-limit[data-limit="paths"]'),
    topPerClient: state('#top details.top-limit[data-limit="per_client"]'),
  };
})()`

// waitDecision asks for client=value until the answer is want: an
// override reaches the decisions at the next refresh (200 ms here).
func waitDecision(t *testing.T, s *server, value string, want pb.RateLimitResponse_Code) {
	t.Helper()
	start := time.Now()
	for s.ask(t, "client", value) != want {
		if time.Since(start) > waitTimeout {
			t.Fatalf("client=%s: not %v after %v", value, want, waitTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Package console serves the live console on the debug listener: one page
// (/console) that opens on who is denied now (the limits denying in the
// last minute, most denied first, with their top clients), then the rules
// and their decisions per second, the clients each limit denies most
// (pkg/topk), the explain form, the overrides in force with create and
// delete, and the backend's health; and the top lists as JSON
// (/debug/top) for scripts and `envoy-rls top`.
//
// The page and its script and style are embedded (no outside assets: it
// works air-gapped) and polled, once a second for the live panels (see
// docs/console.md for why polling, not server-sent events). It is served
// with a strict Content-Security-Policy (scripts and styles from the page's
// own origin only, no inline script), X-Frame-Options: DENY, and the script
// writes every value with textContent, so a descriptor value carrying HTML
// shows as text.
//
// Reads need only the debug listener's reach. Writes (overrides) go to the
// admin API it is given, which checks the admin token, after a CSRF check
// of its own: a double-submit token (a cookie the page's script cannot
// read, and the same value in the page, sent back in a header) and, when
// the browser sends them, Origin and Sec-Fetch-Site naming this origin.
//
// console must not decide, count or store anything: it reads what the
// composition root hands it (the sketch, the sampled decision counts, the
// rules page, the health) and forwards writes to the admin API.
package console

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/jsonhttp"

	"github.com/envoy-rls/envoy-rls/pkg/topk"
)

//go:embed static
var static embed.FS

// Paths the console serves.
const (
	Path    = "/console"
	TopPath = "/debug/top"
	// apiOverrides takes the page's override writes.
	apiOverrides = "/console/api/overrides"
	csrfCookie   = "envoy_rls_console_csrf"
	csrfHeader   = "X-Console-CSRF"
)

// Options are what the console shows and where writes go. Nil fields
// leave their panel empty.
type Options struct {
	// Replica names this replica on the page (its pod name): the page
	// shows this replica's own traffic only. Empty names it by the address
	// the request came in on.
	Replica string
	// Top is the heavy-hitter sketch the service feeds.
	Top *topk.Set
	// Rates are the sampled decisions per second.
	Rates *Rates
	// Config returns the /debug/config page (rules, effective limits,
	// overrides in force).
	Config func() any
	// Source returns the rule source's state.
	Source func() SourceState
	// Health returns the backend's health; it bounds its own duration by
	// ctx.
	Health func(ctx context.Context) any
	// Explain serves an explain request (pkg/explain's handler).
	Explain http.Handler
	// Admin serves the admin API under /admin/, token check included
	// (pkg/admin.RequireToken).
	Admin http.Handler
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// SourceState is where the rules come from and how their last loads went.
type SourceState struct {
	// Kind is "file" or "xds"; Name the directory or the xDS server.
	Kind string `json:"kind"`
	Name string `json:"name"`
	// LastGood is the last load that worked; zero before one.
	LastGood time.Time `json:"last_good"`
	// LastError is the last failed load's error (file:line: yaml.path:
	// problem, one a line), and LastErrorAt when it failed; a later good
	// load does not clear it, so a flapping source shows.
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at"`
	Loads       uint64    `json:"loads"`
	Errors      uint64    `json:"errors"`
}

// contentSecurityPolicy allows the page's own script, style and API, and
// nothing else: no inline script or style, no frames, no plugins.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the console under Path and the top lists at TopPath.
func Handler(o Options) http.Handler {
	if o.Now == nil {
		o.Now = time.Now
	}
	page := template.Must(template.ParseFS(static, "static/index.html"))
	// The embedded tree has the directory: Sub cannot fail.
	assets, _ := fs.Sub(static, "static")
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Path, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Path+"/", http.StatusFound)
	})
	mux.HandleFunc("GET "+Path+"/{$}", func(w http.ResponseWriter, r *http.Request) {
		token := csrfToken(r)
		http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: token, Path: Path, HttpOnly: true,
			SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
		secure(w)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = page.Execute(w, struct{ Replica, CSRF string }{o.replica(r), token})
	})
	files := http.StripPrefix(Path+"/", http.FileServerFS(assets))
	for _, name := range []string{"app.js", "app.css"} {
		mux.HandleFunc("GET "+Path+"/"+name, func(w http.ResponseWriter, r *http.Request) {
			secure(w)
			files.ServeHTTP(w, r)
		})
	}
	mux.HandleFunc("GET "+Path+"/api/state", func(w http.ResponseWriter, r *http.Request) {
		st := state{Replica: o.replica(r), Now: o.Now().UTC()}
		if o.Config != nil {
			st.Config = o.Config()
		}
		if o.Source != nil {
			s := o.Source()
			st.Source = &s
		}
		writeJSON(w, http.StatusOK, st)
	})
	mux.HandleFunc("GET "+Path+"/api/rates", func(w http.ResponseWriter, r *http.Request) {
		if o.Rates == nil {
			writeJSON(w, http.StatusOK, RatesView{Limits: []LimitRates{}})
			return
		}
		writeJSON(w, http.StatusOK, o.Rates.View())
	})
	mux.HandleFunc("GET "+Path+"/api/health", func(w http.ResponseWriter, r *http.Request) {
		if o.Health == nil {
			writeJSON(w, http.StatusOK, struct{}{})
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		writeJSON(w, http.StatusOK, o.Health(ctx))
	})
	if o.Explain != nil {
		// Explain reads only; it takes a POST for its body, and the CSRF
		// check costs nothing here.
		mux.Handle("POST "+Path+"/api/explain", checkCSRF(o.Explain))
	}
	if o.Admin != nil {
		forward := checkCSRF(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r2 := r.Clone(r.Context())
			r2.URL.Path = "/admin/overrides"
			r2.RequestURI = ""
			o.Admin.ServeHTTP(w, r2)
		}))
		mux.Handle("POST "+apiOverrides, forward)
		mux.Handle("DELETE "+apiOverrides, forward)
	}
	mux.HandleFunc("GET "+TopPath, func(w http.ResponseWriter, r *http.Request) { serveTop(w, r, o) })
	return mux
}

// replica is Options.Replica, else the listener's address r came in on.
func (o Options) replica(r *http.Request) string {
	if o.Replica != "" {
		return o.Replica
	}
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		return a.String()
	}
	return r.Host
}

// state is the page's slow-changing part: the rules and their source.
type state struct {
	Replica string       `json:"replica"`
	Now     time.Time    `json:"now"`
	Config  any          `json:"config,omitempty"`
	Source  *SourceState `json:"source,omitempty"`
}

// TopPage is the body of GET TopPath.
type TopPage struct {
	Replica string `json:"replica"`
	// Window is the window asked for ("1m"); Covers the span the buckets
	// read may cover (Window plus the live bucket).
	Window string `json:"window"`
	Covers string `json:"covers"`
	topk.Report
}

// serveTop answers GET TopPath?window=1m&n=10.
func serveTop(w http.ResponseWriter, r *http.Request, o Options) {
	if o.Top == nil {
		writeError(w, http.StatusNotFound, errors.New("console: the top-clients sketch is off"))
		return
	}
	q := r.URL.Query()
	window := time.Minute
	if v := q.Get("window"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Errorf("console: window: %w (want a duration such as 1m or 10m)", err))
			return
		}
		window = d
	}
	n := 10
	if v := q.Get("n"); v != "" {
		i, err := strconv.Atoi(v)
		if err != nil || i < 1 || i > 1000 {
			writeError(w, http.StatusBadRequest, fmt.Errorf("console: n: %q (want 1 to 1000)", v))
			return
		}
		n = i
	}
	rep, err := o.Top.Top(o.Now(), window, n)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	writeJSON(w, http.StatusOK, TopPage{Replica: o.replica(r), Window: window.String(), Covers: rep.Covers.String(), Report: rep})
}

// secure sets the headers every page and asset gets.
func secure(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

// csrfToken returns the request's token when its cookie holds a
// well-formed one (several tabs share it), else a new random one.
func csrfToken(r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil {
		if b, err := base64.RawURLEncoding.DecodeString(c.Value); err == nil && len(b) == 32 {
			return c.Value
		}
	}
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// checkCSRF serves h only to a request from the console's own page: its
// header token equals its cookie token, and the Origin and Sec-Fetch-Site
// headers, when present, say same origin. Another site's page can make a
// browser send the cookie, but can neither read it nor the page's copy,
// nor (without CORS, which the console never grants) set the header.
func checkCSRF(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := sameOrigin(r); err != nil {
			writeError(w, http.StatusForbidden, err)
			return
		}
		c, err := r.Cookie(csrfCookie)
		got := r.Header.Get(csrfHeader)
		if err != nil || got == "" || subtle.ConstantTimeCompare([]byte(c.Value), []byte(got)) != 1 {
			writeError(w, http.StatusForbidden, errors.New("console: missing or wrong CSRF token: reload the console page"))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// sameOrigin refuses a request a browser marks as coming from elsewhere.
func sameOrigin(r *http.Request) error {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" {
		return fmt.Errorf("console: cross-site request refused (Sec-Fetch-Site: %s)", s)
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || !strings.EqualFold(u.Host, r.Host) {
			return fmt.Errorf("console: cross-origin request refused (Origin %q, host %q)", o, r.Host)
		}
	}
	return nil
}

// consoleHeaders: the console's answers are live (never cached) and are
// JSON only (never sniffed into something a browser would run).
func consoleHeaders(w http.ResponseWriter) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	consoleHeaders(w)
	jsonhttp.Write(w, code, v)
}

func writeError(w http.ResponseWriter, code int, err error) {
	consoleHeaders(w)
	jsonhttp.Error(w, code, err)
}

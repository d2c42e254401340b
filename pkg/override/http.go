package override

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/envoy-rls/envoy-rls/pkg/jsonhttp"

	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// Path is where the admin API serves overrides: GET lists, POST sets,
// DELETE clears.
const Path = "/admin/overrides"

// SetRequest is the body of POST Path. Exactly one of Factor and
// RequestsPerUnit must be given.
type SetRequest struct {
	Domain          string   `json:"domain"`
	Limit           string   `json:"limit"`
	Factor          *float64 `json:"factor,omitempty"`
	RequestsPerUnit *uint32  `json:"requests_per_unit,omitempty"`
	// TTL is a Go duration ("15m").
	TTL    string `json:"ttl"`
	Reason string `json:"reason"`
	By     string `json:"by,omitempty"`
}

// toOverride checks r and returns the manual override and TTL it asks for.
func (r *SetRequest) toOverride() (Override, time.Duration, error) {
	o := Override{Domain: r.Domain, Limit: r.Limit, Source: Manual, Reason: r.Reason, By: r.By, RequestsPerUnit: r.RequestsPerUnit}
	if r.Factor != nil {
		if !(*r.Factor > 0) {
			return o, 0, fmt.Errorf("override: factor: %v (want above 0; requests_per_unit: 0 blocks)", *r.Factor)
		}
		o.Factor = *r.Factor
	}
	ttl, err := time.ParseDuration(r.TTL)
	if err != nil {
		return o, 0, fmt.Errorf("override: ttl: %w (want a duration such as 15m)", err)
	}
	return o, ttl, nil
}

// listResponse is the body of GET Path and DELETE Path.
type listResponse struct {
	Overrides []Override `json:"overrides"`
}

// Handler serves the override API of t at Path. It does no
// authentication: mount it behind the admin listener's. With rulesNow, a
// set naming a limit the loaded rules do not have is refused (400).
func Handler(t *Table, rulesNow func() *rules.Snapshot) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Path, func(w http.ResponseWriter, r *http.Request) {
		list, err := t.List(r.Context())
		reply(w, listResponse{Overrides: list}, err)
	})
	mux.HandleFunc("POST "+Path, func(w http.ResponseWriter, r *http.Request) {
		var req SetRequest
		dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			httpError(w, http.StatusBadRequest, fmt.Errorf("override: decode request: %w", err))
			return
		}
		o, ttl, err := req.toOverride()
		if err == nil && rulesNow != nil {
			err = CheckTarget(rulesNow(), o.Domain, o.Limit)
		}
		if err != nil {
			httpError(w, http.StatusBadRequest, err)
			return
		}
		o, err = t.Set(r.Context(), o, ttl)
		if errors.Is(err, errInvalid) {
			httpError(w, http.StatusBadRequest, err)
			return
		}
		reply(w, listResponse{Overrides: []Override{o}}, err)
	})
	mux.HandleFunc("DELETE "+Path, func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		f := Filter{Domain: q.Get("domain"), Limit: q.Get("limit"), Source: Source(q.Get("source"))}
		if f.Domain == "" && q.Get("all") != "true" {
			httpError(w, http.StatusBadRequest, errors.New("override: clear: want domain (and optionally limit), or all=true to clear every override"))
			return
		}
		gone, err := t.Clear(r.Context(), f, q.Get("by"), q.Get("reason"))
		if errors.Is(err, errInvalid) {
			httpError(w, http.StatusBadRequest, err)
			return
		}
		reply(w, listResponse{Overrides: gone}, err)
	})
	return mux
}

// reply writes v as JSON, or err as a 500: the store failed.
func reply(w http.ResponseWriter, v any, err error) {
	if err != nil {
		httpError(w, http.StatusInternalServerError, err)
		return
	}
	jsonhttp.Write(w, http.StatusOK, v)
}

func httpError(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = fmt.Fprintln(w, err)
}

// Client calls the override API of a running envoy-rls.
type Client struct {
	// Base is the admin listener's URL, "http://127.0.0.1:6070".
	Base string
	// Token is the bearer token; empty sends none.
	Token string
	// HTTP is the client to use; nil means one with a 10 s timeout.
	HTTP *http.Client
}

// Set sets the override req describes and returns it as stored.
func (c *Client) Set(ctx context.Context, req SetRequest) (Override, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return Override{}, fmt.Errorf("override: encode request: %w", err)
	}
	list, err := c.do(ctx, http.MethodPost, "", body)
	if err != nil {
		return Override{}, err
	}
	if len(list) != 1 {
		return Override{}, fmt.Errorf("override: set: server returned %d overrides, want 1", len(list))
	}
	return list[0], nil
}

// List returns the live overrides.
func (c *Client) List(ctx context.Context) ([]Override, error) {
	return c.do(ctx, http.MethodGet, "", nil)
}

// Clear removes the overrides f selects (all of them when f is zero) and
// returns them.
func (c *Client) Clear(ctx context.Context, f Filter, by, reason string) ([]Override, error) {
	q := url.Values{"by": {by}, "reason": {reason}}
	if f.Domain == "" {
		q.Set("all", "true")
	}
	for k, v := range map[string]string{"domain": f.Domain, "limit": f.Limit, "source": string(f.Source)} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return c.do(ctx, http.MethodDelete, "?"+q.Encode(), nil)
}

func (c *Client) do(ctx context.Context, method, query string, body []byte) ([]Override, error) {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.Base, "/")+Path+query, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("override: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("override: %s %s: %w", method, Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, fmt.Errorf("override: read response: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("override: %s %s: %s: %s", method, Path, resp.Status, strings.TrimSpace(string(b)))
	}
	var lr listResponse
	if err := json.Unmarshal(b, &lr); err != nil {
		return nil, fmt.Errorf("override: decode response: %w", err)
	}
	return lr.Overrides, nil
}

// WriteTable writes list for a person: one override a line, with its
// change, expiry, reason and author.
func WriteTable(w io.Writer, list []Override) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DOMAIN\tLIMIT\tSOURCE\tCHANGE\tEXPIRES\tREASON\tBY")
	for _, o := range list {
		change := fmt.Sprintf("factor=%g", o.Factor)
		if o.RequestsPerUnit != nil {
			change = fmt.Sprintf("requests_per_unit=%d", *o.RequestsPerUnit)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", o.Domain, o.Limit, o.Source, change,
			o.Expires.UTC().Format(time.RFC3339), o.Reason, o.By)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("override: write table: %w", err)
	}
	return nil
}

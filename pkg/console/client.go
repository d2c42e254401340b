package console

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// TopClient reads a running server's top lists (GET TopPath), for
// `envoy-rls top`.
type TopClient struct {
	// Base is the debug listener's URL, "http://127.0.0.1:6070".
	Base string
	// HTTP is the client to use; nil means one with a 10 s timeout.
	HTTP *http.Client
}

// Fetch returns the top n values per limit over window ("1m").
func (c TopClient) Fetch(ctx context.Context, window string, n int) (TopPage, error) {
	q := url.Values{"window": {window}, "n": {strconv.Itoa(n)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(c.Base, "/")+TopPath+"?"+q.Encode(), nil)
	if err != nil {
		return TopPage{}, fmt.Errorf("console: %w", err)
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return TopPage{}, fmt.Errorf("console: GET %s: %w", TopPath, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return TopPage{}, fmt.Errorf("console: read %s: %w", TopPath, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return TopPage{}, fmt.Errorf("console: GET %s: %s: %s", TopPath, resp.Status, e.Error)
		}
		return TopPage{}, fmt.Errorf("console: GET %s: %s: %s", TopPath, resp.Status, strings.TrimSpace(string(b)))
	}
	var p TopPage
	if err := json.Unmarshal(b, &p); err != nil {
		return TopPage{}, fmt.Errorf("console: decode %s: %w", TopPath, err)
	}
	return p, nil
}

// WriteTop writes p for a terminal: per limit, its denied and seen
// totals, then its most denied and most seen values with their counts.
// Values are quoted (Go syntax), so control characters in them cannot
// move the cursor or change the terminal.
func WriteTop(w io.Writer, p TopPage) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	hashed := ""
	if p.Hashed {
		hashed = ", values hashed"
	}
	fmt.Fprintf(tw, "replica %s: its own traffic, window %s (buckets cover up to %s; counts at most N/%d above the truth%s)\n", p.Replica, p.Window, p.Covers, p.K, hashed)
	if len(p.Limits) == 0 {
		fmt.Fprintln(tw, "no decisions in the window")
	}
	for _, l := range p.Limits {
		fmt.Fprintf(tw, "\n%s / %s / %s: %d denied of %d\n", l.Domain, l.Rule, l.Limit, l.Denied, l.Seen)
		fmt.Fprintln(tw, "  LIST\tVALUE\tCOUNT\tAT LEAST")
		for _, it := range l.TopDenied {
			fmt.Fprintf(tw, "  denied\t%s\t%d\t%d\n", strconv.Quote(it.Value), it.Count, it.Lower)
		}
		for _, it := range l.TopSeen {
			fmt.Fprintf(tw, "  seen\t%s\t%d\t%d\n", strconv.Quote(it.Value), it.Count, it.Lower)
		}
	}
	if p.Dropped > 0 {
		fmt.Fprintf(tw, "\n%d decisions of limits beyond the sketch's bound were not tracked\n", p.Dropped)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("console: write top: %w", err)
	}
	return nil
}

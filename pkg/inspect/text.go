package inspect

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// WriteText writes r for people.
func WriteText(w io.Writer, r *Report) error {
	var b strings.Builder
	partial := ""
	if r.Partial {
		partial = " (stopped at --max-keys: partial)"
	}
	fmt.Fprintf(&b, "%d master(s): %d keys scanned%s, %d envoy-rls (%d bytes), %d foreign (left alone), %d unreadable\n",
		r.Masters, r.Scanned, partial, r.Ours, r.MemoryBytes, r.Foreign, r.Unreadable)
	writeGroups(&b, "per domain", r.Domains)
	writeGroups(&b, "per rule", r.Rules)
	fmt.Fprintf(&b, "\nTTL:\n")
	for _, t := range r.TTL {
		fmt.Fprintf(&b, "  %-22s %d\n", t.Label, t.Keys)
	}
	writeKeys(&b, "largest keys", r.Largest)
	by := "counter value"
	if r.TopBy == "freq" {
		by = "OBJECT FREQ (LFU policy)"
	}
	writeKeys(&b, "most used keys, by "+by, r.TopUsed)
	_, err := io.WriteString(w, b.String())
	return err
}

func writeGroups(b *strings.Builder, title string, gs []Group) {
	fmt.Fprintf(b, "\n%s:\n", title)
	for _, g := range gs {
		fmt.Fprintf(b, "  %-40s %8d keys %10d bytes\n", g.Name, g.Keys, g.MemoryBytes)
	}
}

func writeKeys(b *strings.Builder, title string, ks []Key) {
	fmt.Fprintf(b, "\n%s:\n", title)
	for _, k := range ks {
		entries := make([]string, len(k.Entries))
		for i, e := range k.Entries {
			entries[i] = e.Key + "=" + e.Value
		}
		if k.FieldDigest != "" {
			// The entries are unknown: the digest stands for them.
			entries = append(entries, "entries in digest #"+k.FieldDigest)
		}
		name := k.Name
		if k.Field != "" {
			// A fixed window's counter: its hash, then its field there.
			name += " field " + k.Field
		}
		fmt.Fprintf(b, "  %s\n    %s [%s] %s/%s", name, k.Domain, strings.Join(entries, ", "), k.Algorithm, time.Duration(k.PeriodUS)*time.Microsecond)
		if k.Rule != "" {
			fmt.Fprintf(b, " rule %s, remaining %d", k.Rule, k.Remaining)
		}
		fmt.Fprintf(b, "; %s; value %d; ttl %s; %d bytes", k.State, k.Value, ttlText(k.TTLMS), k.MemoryBytes)
		if k.Freq > 0 {
			fmt.Fprintf(b, "; freq %d", k.Freq)
		}
		b.WriteByte('\n')
	}
}

func ttlText(ms float64) string {
	if ms < 0 {
		return "none"
	}
	return (time.Duration(ms * float64(time.Millisecond))).Round(time.Millisecond).String()
}

package rlqs

import (
	"sort"
	"strconv"
	"strings"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
	"github.com/envoy-rls/envoy-rls/pkg/rules"
)

// Entries turns a bucket id, a map with no order, into the descriptor
// entries a rule is matched with: first the keys named in order, in that
// order, when the bucket has them; then the bucket's other keys, sorted by
// name. With no order the path is simply the sorted keys. So a rule file
// that nests `name` above `client` matches a bucket {name, client} with
// order [name client]; without an order it would have to nest `client`
// first.
func Entries(bucket map[string]string, order []string) []algo.Entry {
	out := make([]algo.Entry, 0, len(bucket))
	seen := make(map[string]bool, len(order))
	for _, k := range order {
		if v, ok := bucket[k]; ok && !seen[k] {
			seen[k] = true
			out = append(out, algo.Entry{Key: k, Value: v})
		}
	}
	rest := make([]string, 0, len(bucket)-len(out))
	for k := range bucket {
		if !seen[k] {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	for _, k := range rest {
		out = append(out, algo.Entry{Key: k, Value: bucket[k]})
	}
	return out
}

// BucketKey names a bucket of a domain across replicas and instances: the
// domain and the bucket's pairs sorted by key, each quoted, so no two
// buckets share a name whatever their bytes.
func BucketKey(domain string, bucket map[string]string) string {
	keys := make([]string, 0, len(bucket))
	for k := range bucket {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(strconv.Quote(domain))
	for _, k := range keys {
		b.WriteByte(',')
		b.WriteString(strconv.Quote(k))
		b.WriteByte('=')
		b.WriteString(strconv.Quote(bucket[k]))
	}
	return b.String()
}

// CounterKey names the limit a bucket with descriptor entries draws on:
// the domain, the rule and the entries that identify its counter
// (rules.Rule.KeyEntries), so buckets whose values a share_threshold
// wildcard folds into one counter share one limit, as they do for
// ShouldRateLimit.
func CounterKey(domain string, r *rules.Rule, entries []algo.Entry) string {
	var b strings.Builder
	b.WriteString(strconv.Quote(domain))
	b.WriteByte('/')
	b.WriteString(strconv.Quote(r.ID))
	for _, e := range r.KeyEntries(entries, nil) {
		b.WriteByte(',')
		b.WriteString(strconv.Quote(e.Key))
		b.WriteByte('=')
		b.WriteString(strconv.Quote(e.Value))
	}
	return b.String()
}

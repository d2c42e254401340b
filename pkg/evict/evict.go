// Package evict makes room in a full in-process map the way Redis's
// approximated eviction does: it looks at a few entries rather than
// ordering them all, drops the expired ones among them, and when none was
// expired drops the live one that expires first. The bounded in-process
// stores (pkg/memstore, pkg/denycache) share it, so they evict alike.
//
// It knows nothing of what the entries mean: callers say when an entry
// expires and hold whatever lock guards the map. It imports only the
// standard library.
package evict

// Sample is how many entries a full map looks at to make room, as Redis's
// maxmemory-samples: enough that a map with a fair share of expired
// entries almost never evicts a live one, few enough that a full map's
// write stays cheap.
const Sample = 8

// Sampled looks at up to Sample entries of m, in Go's map order (which
// starts at a random entry). It deletes every sampled entry that is
// expired, and when none was, the sampled one with the smallest until
// among those keep does not protect (keep may be nil). dropped, which may
// be nil, is called with each deleted key, for state kept beside m. It
// returns how many expired entries it deleted and whether it evicted a
// live one.
func Sampled[K comparable, V any](m map[K]V, expired func(V) bool, until func(V) int64, keep func(K) bool, dropped func(K)) (expiredN int, evicted bool) {
	var victim K
	found := false
	var soonest int64
	n := 0
	for k, v := range m {
		if n++; n > Sample {
			break
		}
		if keep != nil && keep(k) {
			continue
		}
		if expired(v) {
			drop(m, k, dropped)
			expiredN++
			continue
		}
		if u := until(v); !found || u < soonest {
			victim, soonest, found = k, u, true
		}
	}
	if expiredN > 0 || !found {
		return expiredN, false
	}
	drop(m, victim, dropped)
	return 0, true
}

func drop[K comparable, V any](m map[K]V, k K, dropped func(K)) {
	delete(m, k)
	if dropped != nil {
		dropped(k)
	}
}

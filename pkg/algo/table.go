package algo

import "strings"

// Spec is every fact about one algorithm that the rest of the tree needs
// besides its Step: the backends, the rules parser, the lease layer and
// the tools read it here rather than listing algorithms themselves. Adding
// an algorithm is a row in specs, its Step (and Expiry), its twin in
// pkg/redisalgo's apply.lua and the differential test; TestSpecs and
// redisalgo's tests fail while one of them is missing.
type Spec struct {
	// Name is the configuration name, e.g. "token_bucket".
	Name string
	// Letter is the algorithm's one-byte code in pkg/redisalgo's keys. It
	// is part of the key layout: changing one needs a new
	// redisalgo.LayoutVersion.
	Letter byte
	// UsesBurst: the capacity is Policy.Burst rather than Policy.Limit.
	UsesBurst bool
	// MayLease: a lease (pkg/lease) keeps the limit exact, because the
	// shared state can be debited the leased hits up front.
	MayLease bool
	// MayQueue: `on_limit: delay` can reserve a later slot (reserve.go),
	// which needs a state that can take a future time.
	MayQueue bool
	// Shape is which State fields the algorithm keeps, and so how its
	// state is stored (codec.go) and described.
	Shape Shape
}

// Shape is the layout of an algorithm's State.
type Shape uint8

const (
	// ShapeWindow keeps a window: Time, Count and (sliding) Prev, or with
	// sub-windows Time and Subs.
	ShapeWindow Shape = iota + 1
	// ShapeLog keeps Log, one time per admitted hit (a sorted set in
	// Redis, see EncodeLog).
	ShapeLog
	// ShapeBucket keeps the exact TAT, Time and Frac.
	ShapeBucket
)

// specs is the algorithm table, indexed by Algorithm.
var specs = [...]Spec{
	FixedWindow:   {Name: "fixed_window", Letter: 'f', MayLease: true, Shape: ShapeWindow},
	SlidingWindow: {Name: "sliding_window", Letter: 's', Shape: ShapeWindow},
	SlidingLog:    {Name: "sliding_log", Letter: 'l', Shape: ShapeLog},
	TokenBucket:   {Name: "token_bucket", Letter: 't', UsesBurst: true, MayLease: true, MayQueue: true, Shape: ShapeBucket},
	GCRA:          {Name: "gcra", Letter: 'g', UsesBurst: true, MayLease: true, MayQueue: true, Shape: ShapeBucket},
}

// Spec returns a's row of the algorithm table, and false (with a zero
// Spec) for an algorithm that has none.
func (a Algorithm) Spec() (Spec, bool) {
	if int(a) < len(specs) && specs[a].Name != "" {
		return specs[a], true
	}
	return Spec{}, false
}

// spec is Spec without the flag: the zero Spec for an unknown algorithm,
// whose every property is false.
func (a Algorithm) spec() Spec {
	s, _ := a.Spec()
	return s
}

// ByLetter returns the algorithm whose key letter is b.
func ByLetter(b byte) (Algorithm, bool) {
	for _, a := range Algorithms {
		if specs[a].Letter == b {
			return a, true
		}
	}
	return 0, false
}

// Where returns the algorithms, in protocol order, whose Spec satisfies
// keep: Where(Spec.Leasable) lists the ones a lease may serve.
func Where(keep func(Spec) bool) []Algorithm {
	var out []Algorithm
	for _, a := range Algorithms {
		if keep(specs[a]) {
			out = append(out, a)
		}
	}
	return out
}

// Leasable reports whether a lease may serve s's limits (MayLease); a
// method value for Where.
func (s Spec) Leasable() bool { return s.MayLease }

// Queueable reports whether s's limits may queue (MayQueue).
func (s Spec) Queueable() bool { return s.MayQueue }

// Bursting reports whether s's capacity is the burst (UsesBurst).
func (s Spec) Bursting() bool { return s.UsesBurst }

// ListNames names list in prose, "fixed_window, token_bucket or gcra",
// the form error messages use, so that a new row appears in all of them.
func ListNames(list []Algorithm) string {
	names := make([]string, len(list))
	for i, a := range list {
		names[i] = a.String()
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

package redisalgo

import (
	"unsafe"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// keyBuf holds a request's keys back to back and hands out string views
// of them, so that the send path never copies a key into a string. It is
// the package's one use of unsafe, and its rule is the owner's: a view is
// valid as long as the bytes it views are not overwritten, and they are
// only overwritten after reset. So a buffer any view of which a flusher
// may still read must not be reset: a lost scratch is never reused, and a
// pooled one is reset only once every call that viewed it has returned.
type keyBuf struct {
	b    []byte
	ends []int // ends[i]: end of key i in b
	// f holds the fields of fixed windows' counters (AppendField), fends
	// their ends; a check of another algorithm has an empty field.
	f     []byte
	fends []int
}

// reset empties k, invalidating every view of it.
func (k *keyBuf) reset() {
	k.b = k.b[:0]
	k.ends = k.ends[:0]
	k.f = k.f[:0]
	k.fends = k.fends[:0]
}

// add appends where c's state is at now as number k.len()-1: prefix and
// its key, or for a fixed window its hash's name (AppendCounterHash, with
// hashes buckets) and its field there. It returns the key's bytes.
func (k *keyBuf) add(prefix string, c algo.Check, now int64, hashes int) []byte {
	start := len(k.b)
	k.b = append(k.b, prefix...)
	if c.Policy.KeyedWindow() {
		fstart := len(k.f)
		k.f = AppendField(k.f, c)
		k.b = AppendCounterHash(k.b, c, now, k.f[fstart:], hashes)
	} else {
		k.b = AppendKey(k.b, c, hashes)
	}
	k.ends = append(k.ends, len(k.b))
	k.fends = append(k.fends, len(k.f))
	return k.b[start:]
}

// setWindow names key i, a fixed window's hash (of policy p), for the
// window holding now: its last windowDigits bytes are the window's
// (AppendCounterHash), the rest is the same for every window.
func (k *keyBuf) setWindow(i int, p algo.Policy, now int64) {
	appendWindow(k.b[:k.ends[i]-windowDigits], p, now)
}

// field returns the field of key i (empty unless a fixed window's) as a
// string that shares k's bytes, as view does.
func (k *keyBuf) field(i int) string { return viewOf(k.f, k.fends, i) }

// view returns key i as a string that shares k's bytes (see keyBuf).
func (k *keyBuf) view(i int) string { return viewOf(k.b, k.ends, i) }

// viewOf returns the i-th of the strings laid end to end in b, which end
// at ends, as a string that shares b's bytes.
func viewOf(b []byte, ends []int, i int) string {
	start := 0
	if i > 0 {
		start = ends[i-1]
	}
	s := b[start:ends[i]]
	return unsafe.String(unsafe.SliceData(s), len(s))
}

// stringBytes views s's bytes, for a reader (a hash) that never writes
// them; it keeps hashing a long key part allocation free.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

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
}

// reset empties k, invalidating every view of it.
func (k *keyBuf) reset() {
	k.b = k.b[:0]
	k.ends = k.ends[:0]
}

// add appends prefix and c's key at now (AppendKeyAt) as key number
// k.len()-1 and returns its bytes.
func (k *keyBuf) add(prefix string, c algo.Check, now int64) []byte {
	start := len(k.b)
	k.b = append(k.b, prefix...)
	k.b = AppendKeyAt(k.b, c, now)
	k.ends = append(k.ends, len(k.b))
	return k.b[start:]
}

// view returns key i as a string that shares k's bytes (see keyBuf).
func (k *keyBuf) view(i int) string {
	start := 0
	if i > 0 {
		start = k.ends[i-1]
	}
	key := k.b[start:k.ends[i]]
	return unsafe.String(unsafe.SliceData(key), len(key))
}

// stringBytes views s's bytes, for a reader (a hash) that never writes
// them; it keeps hashing a long key part allocation free.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

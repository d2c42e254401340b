package algo

import "encoding/binary"

// AppendIdentity appends an encoding of the counter c applies to: Domain,
// every entry's key and value (each length-prefixed, so no two different
// descriptors encode alike), the algorithm and the period. Limit and Burst
// are left out, so changing requests_per_unit keeps the counts (DESIGN §5);
// the algorithm and period are in, because they change what the state
// means. HashTag, Hits and Refund are left out too. Backends use it as the
// in-memory key; it allocates nothing when dst has room.
func (c Check) AppendIdentity(dst []byte) []byte {
	dst = appendLenString(dst, c.Domain)
	dst = binary.AppendUvarint(dst, uint64(len(c.Entries)))
	for _, e := range c.Entries {
		dst = appendLenString(dst, e.Key)
		dst = appendLenString(dst, e.Value)
	}
	dst = append(dst, byte(c.Policy.Algorithm))
	return binary.AppendVarint(dst, c.Policy.Period)
}

func appendLenString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// Package vtcodec is a gRPC codec that marshals messages with the
// reflection-free code vtprotobuf generates (SizeVT and
// MarshalToSizedBufferVTStrict) where a message has it, and hands every
// other message, and every unmarshal, to grpc-go's standard proto codec.
//
// go-control-plane ships that code for Envoy's messages (the rate-limit
// service's RateLimitResponse among them) behind the build tag
// vtprotobuf, and ships no UnmarshalVT: built without the tag the codec is
// the standard one plus a type assertion per message, and decoding never
// changes. With the tag, a response is sized and written in one pass
// without reflection, into one buffer (BENCHMARKS.md, issue 42).
//
// It must not import any envoy-rls package: it knows messages only by the
// methods they have.
package vtcodec

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	// The standard codec must be registered for Fallback to find it.
	_ "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// vtMarshaler is what vtprotobuf generates for a message's marshalling.
type vtMarshaler interface {
	SizeVT() int
	MarshalToSizedBufferVTStrict(dAtA []byte) (int, error)
}

// Codec is the codec; its zero value is not usable: call New.
type Codec struct {
	fallback encoding.CodecV2
}

// New returns the codec, falling back to the registered "proto" codec.
func New() (*Codec, error) {
	fb := encoding.GetCodecV2("proto")
	if fb == nil {
		return nil, fmt.Errorf("vtcodec: no standard proto codec registered")
	}
	return &Codec{fallback: fb}, nil
}

// Name is the standard codec's, so that clients see no difference in the
// content subtype.
func (*Codec) Name() string { return "proto" }

// Marshal writes v with its vtprotobuf code when it has it, into a buffer
// from grpc-go's pool when it is large enough for pooling to pay (as the
// standard codec does), else with the standard codec.
func (c *Codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(vtMarshaler)
	if !ok {
		return c.fallback.Marshal(v)
	}
	size := m.SizeVT()
	if mem.IsBelowBufferPoolingThreshold(size) {
		buf := make([]byte, size)
		if _, err := m.MarshalToSizedBufferVTStrict(buf); err != nil {
			return nil, fmt.Errorf("vtcodec: marshal %T: %w", v, err)
		}
		return mem.BufferSlice{mem.SliceBuffer(buf)}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	if _, err := m.MarshalToSizedBufferVTStrict((*buf)[:size]); err != nil {
		pool.Put(buf)
		return nil, fmt.Errorf("vtcodec: marshal %T: %w", v, err)
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// Unmarshal is the standard codec's: go-control-plane ships no UnmarshalVT.
func (c *Codec) Unmarshal(data mem.BufferSlice, v any) error {
	return c.fallback.Unmarshal(data, v)
}

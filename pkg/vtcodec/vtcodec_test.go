package vtcodec

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

func response() *rlsv3.RateLimitResponse {
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{
		Code:               rlsv3.RateLimitResponse_OK,
		CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: 1_000_000_000, Unit: rlsv3.RateLimitResponse_RateLimit_SECOND},
		LimitRemaining:     999_999_999,
		DurationUntilReset: durationpb.New(1e9),
	}}}
}

// TestRoundTrip: what the codec writes, with or without the vtprotobuf
// build tag, the standard codec reads back equal, and the other way round.
func TestRoundTrip(t *testing.T) {
	c, err := New()
	if err != nil {
		t.Fatal(err)
	}
	std := encoding.GetCodecV2("proto")
	in := response()
	big := response()
	big.RawBody = make([]byte, 64<<10) // above the pooling threshold
	for _, m := range []*rlsv3.RateLimitResponse{in, big} {
		data, err := c.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		out := new(rlsv3.RateLimitResponse)
		if err := std.Unmarshal(data, out); err != nil {
			t.Fatal(err)
		}
		data.Free()
		if !proto.Equal(m, out) {
			t.Fatalf("round trip: got %v, want %v", out, m)
		}
		data, err = std.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		out.Reset()
		if err := c.Unmarshal(data, out); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(m, out) {
			t.Fatalf("unmarshal: got %v, want %v", out, m)
		}
	}
	if c.Name() != "proto" {
		t.Fatalf("Name() = %q, want proto (the content subtype clients send)", c.Name())
	}
}

// TestMarshalAllocs: with the vtprotobuf code a small response costs no
// more allocations than with the standard codec (its buffer, the
// BufferSlice and the Buffer in it): the gain is CPU, not allocations.
func TestMarshalAllocs(t *testing.T) {
	c, err := New()
	if err != nil {
		t.Fatal(err)
	}
	m := response()
	std := encoding.GetCodecV2("proto")
	allocs := func(codec encoding.CodecV2) float64 {
		return testing.AllocsPerRun(200, func() {
			d, _ := codec.Marshal(m)
			d.Free()
		})
	}
	if got, base := allocs(c), allocs(std); got > base {
		t.Fatalf("Marshal allocates %v times, the standard codec %v", got, base)
	}
}

func BenchmarkMarshal(b *testing.B) {
	c, err := New()
	if err != nil {
		b.Fatal(err)
	}
	m := response()
	for _, bc := range []struct {
		name  string
		codec encoding.CodecV2
	}{{"std", encoding.GetCodecV2("proto")}, {"vtcodec", c}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				d, err := bc.codec.Marshal(m)
				if err != nil {
					b.Fatal(err)
				}
				d.Free()
			}
		})
	}
}

package rls

import (
	"errors"
	"fmt"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// validate rejects requests that are malformed or larger than the limits,
// naming the offending field the way protojson spells the request.
func (l RequestLimits) validate(req *pb.RateLimitRequest) error {
	if req.GetDomain() == "" {
		return errors.New("domain: must not be empty")
	}
	if len(req.GetDomain()) > l.MaxValueBytes {
		return fmt.Errorf("domain: %d bytes exceeds the limit of %d", len(req.GetDomain()), l.MaxValueBytes)
	}
	descs := req.GetDescriptors()
	if len(descs) == 0 {
		return errors.New("descriptors: must not be empty")
	}
	if len(descs) > l.MaxDescriptors {
		return fmt.Errorf("descriptors: %d descriptors exceed the limit of %d", len(descs), l.MaxDescriptors)
	}
	for i, d := range descs {
		entries := d.GetEntries()
		if len(entries) == 0 {
			return fmt.Errorf("descriptors[%d].entries: must not be empty", i)
		}
		if len(entries) > l.MaxEntries {
			return fmt.Errorf("descriptors[%d].entries: %d entries exceed the limit of %d", i, len(entries), l.MaxEntries)
		}
		for j, e := range entries {
			switch {
			case e.GetKey() == "":
				return fmt.Errorf("descriptors[%d].entries[%d].key: must not be empty", i, j)
			case len(e.GetKey()) > l.MaxKeyBytes:
				return fmt.Errorf("descriptors[%d].entries[%d].key: %d bytes exceeds the limit of %d", i, j, len(e.GetKey()), l.MaxKeyBytes)
			case len(e.GetValue()) > l.MaxValueBytes:
				return fmt.Errorf("descriptors[%d].entries[%d].value: %d bytes exceeds the limit of %d", i, j, len(e.GetValue()), l.MaxValueBytes)
			}
		}
		if h := d.GetHitsAddend(); h != nil && h.GetValue() > l.MaxHits {
			return fmt.Errorf("descriptors[%d].hits_addend: %d exceeds the limit of %d", i, h.GetValue(), l.MaxHits)
		}
	}
	if h := uint64(req.GetHitsAddend()); h > l.MaxHits {
		return fmt.Errorf("hits_addend: %d exceeds the limit of %d", h, l.MaxHits)
	}
	return nil
}

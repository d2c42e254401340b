package istiopatch

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// Merge merges src into dst, both JSON-shaped forms of the message desc
// describes, with istiod's MERGE semantics (the package doc). A key of src
// that names no field of desc is copied as it is, for Envoy to refuse.
func Merge(dst, src map[string]any, desc protoreflect.MessageDescriptor) error {
	for k, sv := range src {
		if sv == nil {
			continue // JSON null: the field is unset, so nothing merges
		}
		fd := desc.Fields().ByName(protoreflect.Name(k))
		if fd == nil {
			fd = desc.Fields().ByJSONName(k)
		}
		if fd == nil {
			dst[k] = cloneValue(sv)
			continue
		}
		// Whichever spelling dst uses for the field, src's replaces it.
		dk := k
		for _, name := range []string{string(fd.Name()), fd.JSONName()} {
			if _, ok := dst[name]; ok {
				dk = name
			}
		}
		if o := fd.ContainingOneof(); o != nil && !o.IsSynthetic() {
			for i := 0; i < o.Fields().Len(); i++ {
				if other := o.Fields().Get(i); other != fd {
					delete(dst, string(other.Name()))
					delete(dst, other.JSONName())
				}
			}
		}
		merged, skip, err := mergeField(dst[dk], sv, fd)
		if err != nil {
			return fmt.Errorf("%s.%s: %w", desc.FullName(), fd.Name(), err)
		}
		if !skip {
			dst[dk] = merged
		}
	}
	return nil
}

// replacedWhole are the message types istiod's merge replaces instead of
// merging field by field: an Any's type_url and bytes and a Duration (a
// custom merge in istio), and the types whose JSON form is a scalar.
var replacedWhole = map[protoreflect.FullName]bool{
	"google.protobuf.Any": true, "google.protobuf.Duration": true, "google.protobuf.Timestamp": true,
	"google.protobuf.FieldMask": true, "google.protobuf.Value": true, "google.protobuf.Empty": true,
	"google.protobuf.BoolValue": true, "google.protobuf.StringValue": true, "google.protobuf.BytesValue": true,
	"google.protobuf.Int32Value": true, "google.protobuf.UInt32Value": true, "google.protobuf.Int64Value": true,
	"google.protobuf.UInt64Value": true, "google.protobuf.FloatValue": true, "google.protobuf.DoubleValue": true,
}

// mergeField merges one field's src value into its dst value (nil when
// dst has none) and returns the result, or skip when src changes nothing.
func mergeField(dv, sv any, fd protoreflect.FieldDescriptor) (merged any, skip bool, err error) {
	switch {
	case fd.IsList():
		sl, ok := sv.([]any)
		if !ok {
			return cloneValue(sv), false, nil // not a list: Envoy's to refuse
		}
		if len(sl) == 0 {
			return nil, true, nil
		}
		dl, _ := dv.([]any)
		out := append([]any{}, dl...)
		for _, e := range sl {
			out = append(out, cloneValue(e))
		}
		return out, false, nil
	case fd.IsMap():
		sm, ok := sv.(map[string]any)
		if !ok {
			return cloneValue(sv), false, nil
		}
		if len(sm) == 0 {
			return nil, true, nil
		}
		out := map[string]any{}
		if dm, ok := dv.(map[string]any); ok {
			for k, e := range dm {
				out[k] = e
			}
		}
		// A map entry is replaced, not merged.
		for k, e := range sm {
			out[k] = cloneValue(e)
		}
		return out, false, nil
	case fd.Message() != nil:
		name := fd.Message().FullName()
		sm, isObject := sv.(map[string]any)
		switch {
		case replacedWhole[name] || !isObject:
			return cloneValue(sv), false, nil
		case name == "google.protobuf.Struct":
			dm, _ := dv.(map[string]any)
			out := map[string]any{}
			for k, e := range dm {
				out[k] = e
			}
			for k, e := range sm {
				out[k] = cloneValue(e)
			}
			return out, false, nil
		case name == "google.protobuf.ListValue":
			return cloneValue(sv), false, nil
		}
		dm, ok := dv.(map[string]any)
		if !ok {
			dm = map[string]any{}
		}
		if err := Merge(dm, sm, fd.Message()); err != nil {
			return nil, false, err
		}
		return dm, false, nil
	}
	if !fd.HasPresence() && isZero(sv, fd) {
		return nil, true, nil // proto3: a zero scalar is not set, so not merged
	}
	return sv, false, nil
}

// isZero reports whether a JSON scalar is the proto3 default of fd.
func isZero(v any, fd protoreflect.FieldDescriptor) bool {
	switch t := v.(type) {
	case bool:
		return !t
	case float64:
		return t == 0
	case json.Number:
		f, err := t.Float64()
		return err == nil && f == 0
	case string:
		switch fd.Kind() {
		case protoreflect.EnumKind:
			zero := fd.Enum().Values().ByNumber(0)
			return t == "" || (zero != nil && string(zero.Name()) == t)
		case protoreflect.StringKind, protoreflect.BytesKind:
			return t == ""
		default: // 64-bit integers and floats may be JSON strings
			return t == "0" || t == ""
		}
	}
	return false
}

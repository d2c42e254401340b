package meshconfig

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"sigs.k8s.io/yaml"

	// The extensions that the shipped Envoy configs name in typed_config and
	// typed_extension_protocol_options: protojson resolves "@type" through
	// the global registry, so each must be linked in.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// strictJSON rejects unknown fields (DiscardUnknown false is the default;
// spelled out because it is the point).
var strictJSON = protojson.UnmarshalOptions{DiscardUnknown: false}

// unmarshalYAML decodes YAML into m the way Envoy reads a YAML bootstrap:
// YAML → JSON → protojson, rejecting unknown fields and bad enum names.
func unmarshalYAML(data []byte, m proto.Message) error {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return fmt.Errorf("yaml: %w", err)
	}
	return unmarshalStrict(js, m, "")
}

// unmarshalStruct decodes an Istio patch value (a google.protobuf.Struct)
// into the Envoy message m, strictly.
func unmarshalStruct(s *structpb.Struct, m proto.Message) error {
	js, err := protojson.Marshal(s)
	if err != nil {
		return fmt.Errorf("patch value: %w", err)
	}
	return unmarshalStrict(js, m, "patch value as ")
}

// unmarshalStrict decodes the JSON js into m with strictJSON; its error
// names m's type after prefix.
func unmarshalStrict(js []byte, m proto.Message, prefix string) error {
	if err := strictJSON.Unmarshal(js, m); err != nil {
		return fmt.Errorf("%s%s: %w", prefix, m.ProtoReflect().Descriptor().FullName(), err)
	}
	return nil
}

// validator is implemented by every message that protoc-gen-validate
// generated code for (all of Envoy's API).
type validator interface{ ValidateAll() error }

// pgvFieldError is the shape of protoc-gen-validate's per-field errors.
type pgvFieldError interface {
	Field() string
	Reason() string
	Cause() error
}

// validateTree runs ValidateAll on root and on every message below it,
// unpacking every google.protobuf.Any on the way (the generated validators
// stop at an Any: they check its type URL, not its contents). Each problem is
// reported once, at the deepest message it belongs to, with the path of
// that message in proto field names.
func validateTree(root proto.Message) error {
	w := &treeWalker{}
	w.walk(root.ProtoReflect(), string(root.ProtoReflect().Descriptor().Name()), 0)
	return errors.Join(w.errs...)
}

type treeWalker struct {
	errs []error
}

// maxDepth bounds the recursion; Envoy configs nest a few dozen levels deep.
const maxDepth = 200

func (w *treeWalker) walk(m protoreflect.Message, path string, depth int) {
	if depth > maxDepth {
		w.errs = append(w.errs, fmt.Errorf("%s: nested deeper than %d messages", path, maxDepth))
		return
	}
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			w.errs = append(w.errs, fmt.Errorf("%s: cannot unpack Any %q: %w", path, a.GetTypeUrl(), err))
			return
		}
		w.walk(inner.ProtoReflect(), fmt.Sprintf("%s<%s>", path, inner.ProtoReflect().Descriptor().Name()), depth+1)
		return
	}
	if v, ok := m.Interface().(validator); ok {
		w.report(path, v.ValidateAll())
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := string(fd.Name())
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				w.walk(l.Get(i).Message(), fmt.Sprintf("%s.%s[%d]", path, name, i), depth+1)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				w.walk(mv.Message(), fmt.Sprintf("%s.%s[%q]", path, name, k.String()), depth+1)
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			w.walk(v.Message(), path+"."+name, depth+1)
		}
		return true
	})
}

// report adds the problems of one message's ValidateAll, leaving out the
// "embedded message failed validation" summaries: the walk reaches those
// messages and reports their own problems with a precise path.
func (w *treeWalker) report(path string, err error) {
	if err == nil {
		return
	}
	all := []error{err}
	if multi, ok := err.(interface{ AllErrors() []error }); ok {
		all = multi.AllErrors()
	}
	for _, e := range all {
		if fe, ok := e.(pgvFieldError); ok && fe.Cause() != nil &&
			strings.HasPrefix(fe.Reason(), "embedded message failed validation") {
			continue
		}
		w.errs = append(w.errs, fmt.Errorf("%s: %w", path, e))
	}
}

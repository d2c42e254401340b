package kubelint

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"
)

// Objects is a decoded manifest set, by kind, in document order.
type Objects struct {
	Namespaces  []*corev1.Namespace
	ConfigMaps  []*corev1.ConfigMap
	Services    []*corev1.Service
	Deployments []*appsv1.Deployment
	PDBs        []*policyv1.PodDisruptionBudget
	HPAs        []*autoscalingv2.HorizontalPodAutoscaler
	Policies    []*networkingv1.NetworkPolicy
	// The Prometheus Operator's and Gateway API's kinds.
	ServiceMonitors []*monitoringv1.ServiceMonitor
	PodMonitors     []*monitoringv1.PodMonitor
	PrometheusRules []*monitoringv1.PrometheusRule
	Gateways        []*gatewayv1.Gateway
	HTTPRoutes      []*gatewayv1.HTTPRoute
	// Others are the objects of the kinds a Decoder was taught; Check
	// verifies only their metadata.
	Others []Other
}

// Other is an object of a kind this package does not know.
type Other struct {
	Kind string
	Meta metav1.ObjectMeta
	// Value is what the kind's DecodeFunc returned.
	Value any
}

// Ref names one object.
type Ref struct {
	Kind, Namespace, Name string
}

// Refs names every object, kind by kind.
func (o *Objects) Refs() []Ref {
	out := refsOf("Namespace", o.Namespaces)
	out = append(out, refsOf("ConfigMap", o.ConfigMaps)...)
	out = append(out, refsOf("Service", o.Services)...)
	out = append(out, refsOf("Deployment", o.Deployments)...)
	out = append(out, refsOf("PodDisruptionBudget", o.PDBs)...)
	out = append(out, refsOf("HorizontalPodAutoscaler", o.HPAs)...)
	out = append(out, refsOf("NetworkPolicy", o.Policies)...)
	out = append(out, refsOf("ServiceMonitor", o.ServiceMonitors)...)
	out = append(out, refsOf("PodMonitor", o.PodMonitors)...)
	out = append(out, refsOf("PrometheusRule", o.PrometheusRules)...)
	out = append(out, refsOf("Gateway", o.Gateways)...)
	out = append(out, refsOf("HTTPRoute", o.HTTPRoutes)...)
	for _, x := range o.Others {
		out = append(out, Ref{x.Kind, x.Meta.Namespace, x.Meta.Name})
	}
	return out
}

// refsOf names the objects of one kind.
func refsOf[T metav1.Object](kind string, xs []T) []Ref {
	out := make([]Ref, len(xs))
	for i, x := range xs {
		out[i] = Ref{kind, x.GetNamespace(), x.GetName()}
	}
	return out
}

// EnvNames lists the names of every environment variable of every
// Deployment's containers.
func (o *Objects) EnvNames() []string {
	var out []string
	for _, d := range o.Deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				out = append(out, e.Name)
			}
		}
	}
	return out
}

// Env returns the first variable called name in a container of the
// Deployment called deployment, or nil.
func (o *Objects) Env(deployment, name string) *corev1.EnvVar {
	for _, d := range o.Deployments {
		if d.Name != deployment {
			continue
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			for i := range c.Env {
				if c.Env[i].Name == name {
					return &c.Env[i]
				}
			}
		}
	}
	return nil
}

// DecodeFunc decodes one document of a kind this package does not know.
// where names the document; errors should start with it.
type DecodeFunc func(where string, doc []byte) (value any, meta metav1.ObjectMeta, err error)

// Decoder decodes YAML documents strictly, as kubectl's serializer does:
// unknown (including wrongly capitalised) and duplicate fields are errors,
// and so is a kind it was not taught. A Decoder is safe for concurrent use.
type Decoder struct {
	codec  runtime.Decoder
	others map[metav1.TypeMeta]DecodeFunc
}

// NewDecoder returns a Decoder for the built-in kinds Objects holds and
// for others, keyed by apiVersion and kind.
func NewDecoder(others map[metav1.TypeMeta]DecodeFunc) (*Decoder, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme,
		autoscalingv2.AddToScheme, networkingv1.AddToScheme, monitoringv1.AddToScheme, gatewayv1.Install} {
		if err := add(s); err != nil {
			return nil, fmt.Errorf("kubelint: scheme: %w", err)
		}
	}
	return &Decoder{
		codec:  serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer(),
		others: others,
	}, nil
}

// Decode decodes one YAML document into its typed object and adds it to
// objs. where names the document in errors.
func (d *Decoder) Decode(where string, doc []byte, objs *Objects) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if decode, ok := d.others[tm]; ok {
		v, meta, err := decode(where, doc)
		if err != nil {
			return err
		}
		objs.Others = append(objs.Others, Other{Kind: tm.Kind, Meta: meta, Value: v})
		return nil
	}
	obj, gvk, err := d.codec.Decode(doc, nil, nil)
	if err != nil {
		return fmt.Errorf("%s: %s %s: %w", where, tm.APIVersion, tm.Kind, err)
	}
	if !objs.add(obj) {
		return fmt.Errorf("%s: unexpected kind %s (extend the manifest checks before shipping it)", where, gvk)
	}
	return nil
}

// DecodeStream decodes every document of a YAML stream into objs; document
// i is named where[i] in errors. It reports every bad document.
func (d *Decoder) DecodeStream(where string, data []byte, objs *Objects) error {
	docs, err := SplitYAML(data)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	var errs []error
	for i, doc := range docs {
		if err := d.Decode(fmt.Sprintf("%s[%d]", where, i), doc, objs); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// SplitYAML splits a multi-document YAML stream and drops documents that
// hold nothing but comments.
func SplitYAML(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("split yaml documents: %w", err)
		}
		if isBlankYAML(doc) {
			continue
		}
		docs = append(docs, doc)
	}
}

func isBlankYAML(doc []byte) bool {
	for _, line := range strings.Split(string(doc), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && line != "---" && !strings.HasPrefix(line, "#") {
			return false
		}
	}
	return true
}

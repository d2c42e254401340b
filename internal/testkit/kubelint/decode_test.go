package kubelint

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

func TestDecodeGood(t *testing.T) {
	dec, err := NewDecoder(nil)
	if err != nil {
		t.Fatal(err)
	}
	objs := &Objects{}
	if err := dec.DecodeStream("test", []byte(goodManifests), objs); err != nil {
		t.Fatal(err)
	}
	want := []Ref{
		{"Namespace", "", "rls"},
		{"ConfigMap", "rls", "rules"},
		{"Service", "rls", "envoy-rls"}, {"Service", "rls", "redis"},
		{"Deployment", "rls", "envoy-rls"}, {"Deployment", "rls", "redis"},
		{"PodDisruptionBudget", "rls", "envoy-rls"},
	}
	if got := objs.Refs(); !reflect.DeepEqual(got, want) {
		t.Errorf("Refs() = %v, want %v", got, want)
	}
	if got := objs.EnvNames(); !reflect.DeepEqual(got, []string{"ENVOY_RLS_REDIS_URL", "ENVOY_RLS_LOG_LEVEL"}) {
		t.Errorf("EnvNames() = %v", got)
	}
	if e := objs.Env("envoy-rls", "ENVOY_RLS_LOG_LEVEL"); e == nil || e.Value != "info" {
		t.Errorf("Env(envoy-rls, ENVOY_RLS_LOG_LEVEL) = %+v, want value info", e)
	}
	if e := objs.Env("redis", "ENVOY_RLS_LOG_LEVEL"); e != nil {
		t.Errorf("Env(redis, …) = %+v, want nil", e)
	}
}

func TestDecodeBad(t *testing.T) {
	const deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: ns}\nspec:\n  replicas: 2\n"
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{"unknown field", deployment + "  replica: 3\n", []string{"test[0]: apps/v1 Deployment", "strict decoding error", `unknown field "spec.replica"`}},
		{"miscapitalised field", deployment + "  minReadySeconds: 1\n  MinReadySeconds: 2\n", []string{"strict decoding error", "MinReadySeconds"}},
		{"duplicate field", deployment + "  replicas: 3\n", []string{"test[0]", "replicas"}},
		{"wrong type", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: ns}\ndata: [a]\n", []string{"test[0]: v1 ConfigMap"}},
		{"kind the checks do not know", "apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: ns}\n",
			[]string{"test[0]: unexpected kind /v1, Kind=Secret (extend the manifest checks before shipping it)"}},
		{"kind the scheme does not know", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n", []string{"test[0]: example.com/v1 Widget"}},
		{"not YAML", "a: [b\n", []string{"test"}},
		{"second document bad", "apiVersion: v1\nkind: Namespace\nmetadata: {name: ns}\n---\n" + deployment + "  replica: 3\n", []string{"test[1]: apps/v1 Deployment"}},
	}
	dec, err := NewDecoder(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := dec.DecodeStream("test", []byte(tc.doc), &Objects{})
			expectMentions(t, err, tc.want)
		})
	}
}

// widget stands for a kind the caller decodes itself, as meshconfig does
// Istio's EnvoyFilter.
type widget struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Size            int               `json:"size"`
}

func TestDecodeOthers(t *testing.T) {
	kind := metav1.TypeMeta{APIVersion: "example.com/v1", Kind: "Widget"}
	dec, err := NewDecoder(map[metav1.TypeMeta]DecodeFunc{
		kind: func(where string, doc []byte) (any, metav1.ObjectMeta, error) {
			var w widget
			if err := yaml.UnmarshalStrict(doc, &w); err != nil {
				return nil, metav1.ObjectMeta{}, errors.New(where + ": widget: " + err.Error())
			}
			return &w, w.Metadata, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	objs := &Objects{}
	if err := dec.DecodeStream("test", []byte(goodManifests+"---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: elsewhere}\nsize: 3\n"), objs); err != nil {
		t.Fatal(err)
	}
	if len(objs.Others) != 1 || objs.Others[0].Value.(*widget).Size != 3 || !slices.Contains(objs.Refs(), Ref{"Widget", "elsewhere", "w"}) {
		t.Fatalf("Others = %+v, want the widget", objs.Others)
	}
	// Check verifies a taught kind's metadata like any object's.
	err = Check(objs, Options{Rules: testRules()})
	if err == nil || !strings.Contains(err.Error(), `Widget elsewhere/w: namespace "elsewhere" is neither created by the manifests`) {
		t.Errorf("Check = %v, want the widget's namespace reported", err)
	}
	if err := Check(objs, Options{ExternalNamespaces: []string{"elsewhere"}, Rules: testRules()}); err != nil {
		t.Errorf("Check with the namespace external = %v", err)
	}
	err = dec.Decode("w", []byte("apiVersion: example.com/v1\nkind: Widget\ncolour: red\n"), objs)
	if err == nil || !strings.HasPrefix(err.Error(), "w: widget: ") || !strings.Contains(err.Error(), "colour") {
		t.Errorf("bad widget: %v, want the DecodeFunc's error", err)
	}
}

func TestSplitYAML(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want int
	}{
		{"empty", "", 0},
		{"comments only", "# a\n---\n# b\n", 0},
		{"one", "a: 1\n", 1},
		{"blank documents dropped", "---\na: 1\n---\n# only a comment\n---\nb: 2\n---\n", 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			docs, err := SplitYAML([]byte(tc.in))
			if err != nil || len(docs) != tc.want {
				t.Errorf("SplitYAML = %d documents, %v; want %d", len(docs), err, tc.want)
			}
		})
	}
}

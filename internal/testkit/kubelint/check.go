package kubelint

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Options is what Check needs to know beyond the objects.
type Options struct {
	// ExternalNamespaces may hold objects without the manifests creating
	// them, such as Istio's and the sample workload's.
	ExternalNamespaces []string
	// ExternalHosts are host:port addresses outside the manifests that a
	// literal ENVOY_RLS_REDIS_URL may name (a managed Redis).
	ExternalHosts []string
	// Rules says what the envoy-rls rules ConfigMap must hold.
	Rules Rules
}

// Rules says what the ConfigMap mounted as envoy-rls's rules directory
// must hold.
type Rules struct {
	// Files are the rule files it must hold, exactly and nothing else,
	// by path; the ConfigMap's keys are their base names.
	Files map[string][]byte
	// Source is the directory Files come from and CopyDir the one the
	// manifests keep their copy in; messages tell the reader to copy from
	// one to the other.
	Source, CopyDir string
	// Validate loads rule files (name → contents) as envoy-rls would;
	// nil skips it.
	Validate func(files map[string][]byte) error
}

// Check runs every check on a rendered set and returns every problem
// found, joined, each starting with the object it is about.
func Check(objs *Objects, opts Options) error {
	var p problems
	namespaces := map[string]bool{}
	for _, ns := range objs.Namespaces {
		namespaces[ns.Name] = true
	}
	m := metaCheck{created: namespaces, external: opts.ExternalNamespaces}
	configMaps := map[string]*corev1.ConfigMap{}
	for _, cm := range objs.ConfigMaps {
		m.check(&p, "ConfigMap", cm.ObjectMeta)
		configMaps[cm.Namespace+"/"+cm.Name] = cm
	}
	for _, dep := range objs.Deployments {
		checkDeployment(&p, m.check(&p, "Deployment", dep.ObjectMeta), dep, configMaps)
	}
	for _, svc := range objs.Services {
		checkService(&p, m.check(&p, "Service", svc.ObjectMeta), svc, objs.Deployments)
	}
	for _, pdb := range objs.PDBs {
		checkPDB(&p, m.check(&p, "PodDisruptionBudget", pdb.ObjectMeta), pdb, objs.Deployments, objs.HPAs)
	}
	checkExtra(&p, m, objs)
	for _, o := range objs.Others {
		m.check(&p, o.Kind, o.Meta)
	}
	checkRedisURLs(&p, objs, opts.ExternalHosts)
	checkRulesConfigMap(&p, objs, opts.Rules)
	return errors.Join(p...)
}

// problems collects what the checks find.
type problems []error

func (p *problems) add(format string, args ...any) {
	*p = append(*p, fmt.Errorf(format, args...))
}

// Enum values and required fields that Kubernetes validates only on the
// API server, for the fields these checks read.
var (
	pullPolicies   = []string{"", "Always", "IfNotPresent", "Never"}
	protocols      = []string{"", "TCP", "UDP", "SCTP"}
	serviceTypes   = []string{"", "ClusterIP", "NodePort", "LoadBalancer", "ExternalName"}
	probeSchemes   = []string{"", "HTTP", "HTTPS"}
	seccompTypes   = []string{"RuntimeDefault", "Localhost", "Unconfined"}
	strategyTypes  = []string{"", "RollingUpdate", "Recreate"}
	restartPolicy  = []string{"", "Always"}
	evictionPolicy = []string{"", "IfHealthyBudget", "AlwaysAllow"}
)

// enum reports value unless allowed lists it ("" stands for unset).
func (p *problems) enum(where, field, value string, allowed []string) {
	if !slices.Contains(allowed, value) {
		p.add("%s: %s: unsupported value %q (want %s)", where, field, value, strings.Join(nonEmpty(allowed), "|"))
	}
}

func nonEmpty(list []string) []string {
	var out []string
	for _, s := range list {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// metaCheck checks every object's name and namespace.
type metaCheck struct {
	created  map[string]bool
	external []string
}

// check reports a missing name or namespace, or a namespace nobody
// creates, and returns how messages name the object.
func (m metaCheck) check(p *problems, kind string, meta metav1.ObjectMeta) string {
	where := fmt.Sprintf("%s %s/%s", kind, meta.Namespace, meta.Name)
	if meta.Name == "" {
		p.add("%s: metadata.name is required", where)
	}
	switch {
	case meta.Namespace == "":
		p.add("%s: metadata.namespace is required (the kustomization sets none)", where)
	case !m.created[meta.Namespace] && !slices.Contains(m.external, meta.Namespace):
		external := slices.Clone(m.external)
		sort.Strings(external)
		p.add("%s: namespace %q is neither created by the manifests nor one of %v", where, meta.Namespace, external)
	}
	return where
}

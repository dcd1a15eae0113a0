package crdt

import (
	"sort"
	"strings"
)

// ScopeKey names one namespace of one cluster: the unit the enforcer
// recomputes when inventory changes.
type ScopeKey struct {
	Cluster   string
	Namespace string
}

// AffectedScopes summarises a change feed for the enforcer: the (cluster,
// namespace) scopes whose namespace or pods changed, the policies (KindPolicy
// keys) that changed, and the clusters whose KindCluster entry changed. Each
// list is sorted and free of duplicates. Report changes affect only MCNP
// status; see ReportedPolicies.
func AffectedScopes(changes []Change) (namespaces []ScopeKey, policies []Key, clusters []string) {
	ns := map[ScopeKey]struct{}{}
	pol := map[Key]struct{}{}
	cl := map[string]struct{}{}
	for i := range changes {
		k := changes[i].Key
		switch k.Kind {
		case KindCluster:
			cl[k.Origin] = struct{}{}
		case KindNamespace:
			ns[ScopeKey{Cluster: k.Origin, Namespace: k.Name}] = struct{}{}
		case KindPod:
			if n, _, ok := strings.Cut(k.Name, "/"); ok {
				ns[ScopeKey{Cluster: k.Origin, Namespace: n}] = struct{}{}
			}
		case KindPolicy:
			pol[k] = struct{}{}
		}
	}
	for k := range ns {
		namespaces = append(namespaces, k)
	}
	sort.Slice(namespaces, func(i, j int) bool {
		a, b := namespaces[i], namespaces[j]
		if a.Cluster != b.Cluster {
			return a.Cluster < b.Cluster
		}
		return a.Namespace < b.Namespace
	})
	for k := range pol {
		policies = append(policies, k)
	}
	sortKeys(policies)
	for c := range cl {
		clusters = append(clusters, c)
	}
	sort.Strings(clusters)
	return namespaces, policies, clusters
}

// ReportedPolicies returns the policies (KindPolicy keys) whose enforcement
// reports changed, sorted and deduplicated. A report named
// "<policyOrigin>/<ns>/<name>" is about policy {policyOrigin, KindPolicy,
// "<ns>/<name>"}.
func ReportedPolicies(changes []Change) []Key {
	set := map[Key]struct{}{}
	for i := range changes {
		k := changes[i].Key
		if k.Kind != KindReport {
			continue
		}
		origin, rest, ok := strings.Cut(k.Name, "/")
		if !ok || origin == "" || !strings.Contains(rest, "/") {
			continue
		}
		set[Key{Origin: origin, Kind: KindPolicy, Name: rest}] = struct{}{}
	}
	out := make([]Key, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sortKeys(out)
	return out
}

func sortKeys(ks []Key) {
	sort.Slice(ks, func(i, j int) bool {
		a, b := ks[i], ks[j]
		if a.Origin != b.Origin {
			return a.Origin < b.Origin
		}
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return a.Name < b.Name
	})
}

// Package model is the one producer of what a cluster applies: it folds
// the replicated entries (crdt) into an enforce view (Mirror) and turns
// that view into the guarded outputs of one enforcing cluster (Outputs):
// its NetworkPolicies and the reports it publishes. The daemon, `coastguardd
// render` and the benchmarks all go through it. It is pure: no goroutines,
// no clock, no I/O, no Kubernetes client; callers serialise access.
package model

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	apiv1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
)

// Mirror keeps an enforce.Inventory in step with the replicated crdt state and
// tells which policies a batch of changes affects for one enforcing cluster.
// It is deterministic and does no I/O; the caller serialises access.
type Mirror struct {
	self     string
	inv      *enforce.Inventory
	clusters map[string]map[string]string                      // origin -> labels as published
	counts   map[string]int                                    // origin -> live entries mirrored
	reports  map[enforce.PolicyRef]map[string]crdt.ReportValue // policy -> enforcing cluster -> report
	// validOrigin caches the origins found to be DNS-1123 labels (a regexp
	// per change was a measurable share of a join's mirror work).
	validOrigin map[string]bool
	// pd and pod decode live pod values (crdt.PodDecoder, several times
	// cheaper than DecodeValue); pod is reused, so the labels of the
	// enforce.Change that applyPod returns are valid until the next apply.
	pd  crdt.PodDecoder
	pod crdt.PodValue
	// lost: origins retired because they disappeared, and the names
	// (namespace/name) of their policies kept from their last-known state
	// (lost.go).
	lost        map[string]*lostOrigin
	lostChanged map[string]bool
	// pipeline decodes pod entries in batches at load (nil: Sequential).
	pipeline Pipeline
	// errors counts entries that failed to decode (poison values are
	// skipped, never applied half-way).
	DecodeErrors int
}

// NewMirror returns an empty mirror for the enforcing cluster self.
func NewMirror(self string) *Mirror {
	return &Mirror{
		self:     self,
		inv:      enforce.NewInventory(),
		clusters: map[string]map[string]string{},
		counts:   map[string]int{},
		reports:  map[enforce.PolicyRef]map[string]crdt.ReportValue{},
		lost:     map[string]*lostOrigin{},

		validOrigin: map[string]bool{},
	}
}

// SetTrustedLabels pins the labels of other clusters (cluster ID ->
// labels), replacing what they claim in their cluster entries
// (enforce.Inventory.SetPinnedLabels).
func (m *Mirror) SetTrustedLabels(pinned map[string]map[string]string) {
	m.inv.SetPinnedLabels(pinned)
}

// SetNetworks sets the trusted network knowledge of the mirrored inventory
// and reports whether it changed (then every policy must be recomputed).
func (m *Mirror) SetNetworks(n enforce.Networks) bool {
	if m.inv.Networks().Equal(n) {
		return false
	}
	m.inv.SetNetworks(n)
	return true
}

// Inventory returns the mirrored inventory (not a copy).
func (m *Mirror) Inventory() *enforce.Inventory { return m.inv }

// Load rebuilds the mirror from every entry of a state (start-up); see
// load (mirrorload.go).
func (m *Mirror) Load(st *crdt.State) []error { return m.load(st) }

// Result is what one batch of changes means for the enforcer.
type Result struct {
	// Affected policies whose translation for self may have changed, sorted.
	Affected []enforce.PolicyRef
	// StatusDirty lists policies originated by self whose status inputs
	// (reports, spec, the cluster set) changed, sorted.
	StatusDirty []enforce.PolicyRef
	// All is set when every policy must be recomputed.
	All bool
	// LostChanged lists lost origins whose kept policies changed (replaced
	// or deleted by the origin itself, back in the mesh).
	LostChanged []string
	// Errors are decode errors of individual entries (skipped).
	Errors []error
}

// Apply folds a batch of committed changes into the inventory.
func (m *Mirror) Apply(changes []crdt.Change) Result {
	var res Result
	affected := map[enforce.PolicyRef]bool{}
	status := map[enforce.PolicyRef]bool{}
	for _, ch := range changes {
		ech, err := m.apply(ch)
		if err != nil {
			res.Errors = append(res.Errors, err)
			m.DecodeErrors++
			continue
		}
		kind := mirrorKinds[ch.Key.Kind] // known: apply succeeded
		if kind.status != nil {
			if ref, ok := kind.status(m, ch.Key); ok {
				status[ref] = true
			}
		}
		res.All = res.All || kind.all
		if ech == nil {
			continue
		}
		for _, r := range enforce.Affected(m.self, m.inv, *ech) {
			affected[r] = true
		}
	}
	// origins whose last entry went away (retired) disappear entirely
	for origin, n := range m.counts {
		if n <= 0 {
			delete(m.counts, origin)
			delete(m.clusters, origin)
			delete(m.validOrigin, origin)
			if m.lost[origin] != nil {
				m.inv.RemoveClusterKeepPolicies(origin)
			} else {
				m.inv.RemoveCluster(origin)
			}
			res.All = true
		}
	}
	if res.All {
		// cluster set or labels changed: every own policy's enforcing set may change
		for _, r := range m.inv.Policies() {
			if r.Origin == m.self {
				status[r] = true
			}
		}
	}
	res.Affected = sortedRefs(affected)
	res.StatusDirty = sortedRefs(status)
	res.LostChanged = m.takeLostChanged()
	return res
}

func sortedRefs(m map[enforce.PolicyRef]bool) []enforce.PolicyRef {
	out := make([]enforce.PolicyRef, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, enforce.PolicyRef.Compare)
	return out
}

func splitNS(name string) (string, string, bool) {
	i := strings.IndexByte(name, '/')
	if i <= 0 || i == len(name)-1 {
		return "", "", false
	}
	return name[:i], name[i+1:], true
}

func policyRef(k crdt.Key) (enforce.PolicyRef, bool) {
	ns, n, ok := splitNS(k.Name)
	return enforce.PolicyRef{Origin: k.Origin, Namespace: ns, Name: n}, ok
}

// reportPolicy maps a report entry's name "<policyOrigin>/<ns>/<name>" (its
// wire form) to the policy it reports on; !ok for a malformed name.
func reportPolicy(name string) (enforce.PolicyRef, bool) {
	return enforce.ParsePolicyRef(name)
}

func live(e *crdt.Entry) bool { return e != nil && !e.Deleted }

// ensureCluster makes sure the inventory knows an origin even before its
// cluster entry arrives (its cluster.clusterset.k8s.io label is implied).
func (m *Mirror) ensureCluster(origin string) {
	if _, ok := m.clusters[origin]; !ok {
		m.clusters[origin] = nil
		m.inv.SetCluster(enforce.Cluster{ID: origin, LabelsUnknown: true})
	}
}

// apply mirrors one change and returns the enforce.Change describing it (nil
// when the enforcer does not care, e.g. reports).
func (m *Mirror) apply(ch crdt.Change) (*enforce.Change, error) {
	k := ch.Key
	if _, known := mirrorKinds[k.Kind]; !known {
		// A later build's kind, carried opaquely by crdt for newer peers:
		// it is no input of this build's policies (it does not even make
		// its origin a cluster).
		return nil, nil
	}
	if !m.validOrigin[k.Origin] {
		msgs := validation.IsDNS1123Label(k.Origin)
		if len(msgs) == 0 {
			m.validOrigin[k.Origin] = true
			return m.applyValid(ch)
		}
		// received over gossip (or loaded from a store written by an older
		// version): an origin that is not a DNS label could make generated
		// names ambiguous; the entry is skipped
		return nil, fmt.Errorf("entry %s/%s of origin %q received over gossip: origin is not a valid cluster ID (DNS-1123 label): %s",
			k.Kind, k.Name, k.Origin, strings.Join(msgs, "; "))
	}
	return m.applyValid(ch)
}

// applyValid is apply for a change of a valid origin.
func (m *Mirror) applyValid(ch crdt.Change) (*enforce.Change, error) {
	k := ch.Key
	wasLive, isLive := live(ch.Old), live(ch.New)
	if wasLive && !isLive {
		m.counts[k.Origin]--
	} else if !wasLive && isLive {
		m.counts[k.Origin]++
	}
	if isLive {
		m.ensureCluster(k.Origin)
	}
	return mirrorKinds[k.Kind].decode(m, ch, isLive)
}

// applyCluster mirrors a cluster entry (labels, CIDRs, Globalnet).
func (m *Mirror) applyCluster(ch crdt.Change, isLive bool) (*enforce.Change, error) {
	k := ch.Key
	// a deleted cluster entry leaves the labels unknown (not empty): the
	// cluster then matches only clusterSelectors naming its ID
	c := enforce.Cluster{ID: k.Origin, LabelsUnknown: !isLive}
	if isLive {
		var v crdt.ClusterValue
		if err := crdt.DecodeValue(ch.New.Value, &v); err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		c.Labels = v.Labels
		c.PodCIDRs = v.PodCIDRs
		c.Globalnet = v.Globalnet
		c.GlobalCIDRs = v.GlobalCIDRs
		c.ClusterEgressIPs = v.ClusterEgressIPs
		c.NamespaceEgressIPs = v.NamespaceEgressIPs
	}
	if isLive || m.counts[k.Origin] > 0 {
		m.clusters[k.Origin] = c.Labels
		m.inv.SetCluster(c)
	}
	return &enforce.Change{Kind: enforce.ChangeCluster, Cluster: k.Origin}, nil
}

// applyNamespace mirrors a namespace entry.
func (m *Mirror) applyNamespace(ch crdt.Change, isLive bool) (*enforce.Change, error) {
	k := ch.Key
	ech := &enforce.Change{Kind: enforce.ChangeNamespace, Cluster: k.Origin, Namespace: k.Name}
	var old labels.Labels // the labels the inventory had (not ch.Old: the hold may have kept it from the mirror)
	if isLive {
		var v crdt.NamespaceValue
		if err := crdt.DecodeValue(ch.New.Value, &v); err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		old = m.inv.SetNamespace(k.Origin, enforce.Namespace{Name: k.Name, Labels: v.Labels})
		ech.Labels = append(ech.Labels, labels.Set(withNameLabel(v.Labels, k.Name)))
	} else {
		old = m.inv.RemoveNamespace(k.Origin, k.Name)
	}
	if old != nil {
		ech.Labels = append(ech.Labels, old)
	}
	return ech, nil
}

// applyPod mirrors a pod entry.
func (m *Mirror) applyPod(ch crdt.Change, isLive bool) (*enforce.Change, error) {
	k := ch.Key
	ns, name, ok := splitNS(k.Name)
	if !ok {
		return nil, fmt.Errorf("%s: pod name is not namespace/name", k)
	}
	ech := &enforce.Change{Kind: enforce.ChangePod, Cluster: k.Origin, Namespace: ns}
	var old labels.Labels // the labels the inventory had (read-only)
	if isLive {
		v := &m.pod
		if err := m.pd.Decode(ch.New.Value, v); err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		p := enforce.Pod{Namespace: ns, Name: name, Labels: v.Labels, IPs: v.IPs,
			Phase: corev1.PodPhase(v.Phase), HostNetwork: v.HostNetwork, EgressIPs: v.EgressIPs, NotReady: v.NotReady}
		for _, port := range v.Ports {
			p.Ports = append(p.Ports, enforce.Port{Name: port.Name, Port: port.Port, Protocol: corev1.Protocol(port.Protocol)})
		}
		old = m.inv.SetPod(k.Origin, p)
		ech.Labels = append(ech.Labels, labels.Set(v.Labels))
	} else {
		old = m.inv.RemovePod(k.Origin, ns, name)
	}
	if old != nil {
		ech.Labels = append(ech.Labels, old)
	}
	if len(ech.Labels) == 0 {
		ech.Labels = nil // conservative
	}
	return ech, nil
}

// applyPolicy mirrors an MCNP entry; an invalid policy is still recorded.
func (m *Mirror) applyPolicy(ch crdt.Change, isLive bool) (*enforce.Change, error) {
	k := ch.Key
	ref, ok := policyRef(k)
	if !ok {
		return nil, fmt.Errorf("%s: policy name is not namespace/name", k)
	}
	ech := &enforce.Change{Kind: enforce.ChangePolicy, Cluster: k.Origin, Namespace: ref.Namespace, Policy: ref}
	if m.keepLost(k, ch) {
		return nil, nil // retired with its lost origin: kept as last known
	}
	if isLive {
		var v crdt.PolicyValue
		if err := crdt.DecodeValue(ch.New.Value, &v); err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		spec, unknown, err := apiv1.DecodeSpec(v.Spec)
		if err != nil {
			m.inv.RemovePolicy(ref)
			return ech, fmt.Errorf("%s: spec: %w", k, err)
		}
		// An invalid policy is still recorded (it only isolates its pods
		// where it is enforced, and every cluster reports the error); so is
		// one with fields this build does not know (Policy.Unknown).
		_ = m.inv.SetPolicy(enforce.Policy{Origin: k.Origin, Namespace: ref.Namespace, Name: ref.Name,
			UID: v.UID, Generation: v.Generation, Spec: spec, Unknown: unknown})
	} else {
		m.inv.RemovePolicy(ref)
	}
	return ech, nil
}

// applyService mirrors an exported Service entry.
func (m *Mirror) applyService(ch crdt.Change, isLive bool) (*enforce.Change, error) {
	k := ch.Key
	ns, name, ok := splitNS(k.Name)
	if !ok {
		return nil, fmt.Errorf("%s: service name is not namespace/name", k)
	}
	ech := &enforce.Change{Kind: enforce.ChangeService, Cluster: k.Origin, Namespace: ns}
	if !isLive {
		m.inv.RemoveService(k.Origin, ns, name)
		return ech, nil
	}
	var v crdt.ServiceValue
	if err := crdt.DecodeValue(ch.New.Value, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", k, err)
	}
	s := enforce.Service{Namespace: ns, Name: name, ClusterIPs: v.ClusterIPs, Selector: v.Selector, Headless: v.Headless,
		GlobalIPs: v.GlobalIPs, PublishNotReady: v.PublishNotReady}
	for _, p := range v.Ports {
		s.Ports = append(s.Ports, enforce.ServicePort{Name: p.Name, Port: p.Port, TargetPort: p.TargetPort,
			TargetPortName: p.TargetPortName, Protocol: corev1.Protocol(p.Protocol)})
	}
	m.inv.SetService(k.Origin, s)
	return ech, nil
}

// applyReport mirrors a report entry (kept for status; the enforcer does not care).
func (m *Mirror) applyReport(ch crdt.Change, isLive bool) (*enforce.Change, error) {
	k := ch.Key
	pk, ok := reportPolicy(k.Name)
	if !ok {
		return nil, fmt.Errorf("%s: report name is not origin/namespace/name", k)
	}
	if isLive {
		var v crdt.ReportValue
		if err := crdt.DecodeValue(ch.New.Value, &v); err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		if m.reports[pk] == nil {
			m.reports[pk] = map[string]crdt.ReportValue{}
		}
		m.reports[pk][k.Origin] = v
	} else if r := m.reports[pk]; r != nil {
		delete(r, k.Origin)
		if len(r) == 0 {
			delete(m.reports, pk)
		}
	}
	return nil, nil
}

func withNameLabel(l map[string]string, name string) map[string]string {
	out := make(map[string]string, len(l)+1)
	for k, v := range l {
		out[k] = v
	}
	out[corev1.LabelMetadataName] = name
	return out
}

// Reports returns the enforcement reports on a policy, by enforcing cluster.
func (m *Mirror) Reports(ref enforce.PolicyRef) map[string]crdt.ReportValue {
	out := make(map[string]crdt.ReportValue, len(m.reports[ref]))
	for c, r := range m.reports[ref] {
		out[c] = r
	}
	return out
}

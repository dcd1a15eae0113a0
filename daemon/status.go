package daemon

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	v1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/kube"
)

// statusStore reads and writes MCNP status (kube.StatusWriter).
type statusStore interface {
	Policy(namespace, name string) (*unstructured.Unstructured, v1.MultiClusterNetworkPolicyStatus, error)
	Update(ctx context.Context, namespace, name string, status v1.MultiClusterNetworkPolicyStatus) (bool, error)
}

// statusLoop aggregates the replicated reports on this cluster's own MCNPs
// into their status, fired by a debouncer over policies. Only the
// leader of a cluster still in the set writes status; a failed update is
// marked again (level-triggered retry).
type statusLoop struct {
	self  string
	view  *view
	roles *roles
	store statusStore // set before the debouncer runs
	mark  func(keys ...enforce.PolicyRef)
	m     *metrics
	log   *slog.Logger
}

// MarkAll marks every own policy (at the start of a leadership term).
func (s *statusLoop) MarkAll() {
	s.view.mu.Lock()
	var keys []enforce.PolicyRef
	for _, r := range s.view.mirror.Inventory().Policies() {
		if r.Origin == s.self {
			keys = append(keys, r)
		}
	}
	s.view.mu.Unlock()
	if len(keys) > 0 {
		s.mark(keys...)
	}
}

// Fire updates the status of the given policies.
func (s *statusLoop) Fire(ctx context.Context, keys []enforce.PolicyRef) {
	if !s.roles.acting() {
		return
	}
	for _, k := range keys {
		st, ns, name, ok := s.aggregate(k)
		if !ok {
			continue
		}
		if _, err := s.store.Update(ctx, ns, name, st); err != nil && !errors.Is(err, kube.ErrNotLeader) {
			s.log.Warn("status update failed; will retry", "policy", k, "err", err)
			s.mark(k)
		} else if err == nil {
			s.m.statusUpdates.Inc()
		}
	}
}

// aggregate computes the status of one own policy from its reports; !ok
// when ref is not an own policy, or the policy is unknown here.
func (s *statusLoop) aggregate(ref enforce.PolicyRef) (st v1.MultiClusterNetworkPolicyStatus, ns, name string, ok bool) {
	if ref.Origin != s.self {
		return st, "", "", false
	}
	s.view.mu.Lock()
	inv := s.view.mirror.Inventory()
	p, exists := inv.Policy(ref)
	reports := s.view.mirror.Reports(ref)
	// the clusterSelector evaluated by the translator's own code, so
	// status cannot disagree with what is enforced
	enforcing, err := enforce.EnforcingClusters(inv, ref)
	unknown := labelsUnknown(inv, p, enforcing)
	s.view.mu.Unlock()
	if !exists {
		return st, "", "", false
	}
	if err != nil {
		enforcing = nil
	}
	_, prev, err := s.store.Policy(ref.Namespace, ref.Name)
	if err != nil {
		return st, "", "", false // not in the local cache (yet, or deleted)
	}
	st = kube.Aggregate(kube.AggregateInput{Generation: p.Generation, Reports: reports,
		Enforcing: enforcing, LabelsUnknown: unknown, Previous: prev.Conditions, Now: time.Now()})
	return st, ref.Namespace, ref.Name, true
}

// labelsUnknown lists the clusters of the inventory whose labels are
// unknown and that a policy's clusterSelector does not select (they match
// only a selector naming their ID): the status names them. Nil for a
// policy without clusterSelector (its origin only).
func labelsUnknown(inv *enforce.Inventory, p enforce.Policy, enforcing []string) []string {
	if p.Spec.ClusterSelector == nil {
		return nil
	}
	var out []string
	for _, c := range inv.Clusters() {
		if !inv.ClusterLabelsKnown(c) && !slices.Contains(enforcing, c) {
			out = append(out, c)
		}
	}
	return out
}

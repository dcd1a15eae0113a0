package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/record"

	v1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/enforce"
)

// Reasons of CoastguardCluster conditions and Events.
const (
	ReasonMemberAlive     = "MemberAlive"
	ReasonNoMemberAlive   = "NoMemberAlive"
	ReasonSeenRecently    = "SeenRecently"
	ReasonNotSeen         = "NotSeenWithinThreshold"
	ReasonNeverSeen       = "NeverSeen"
	ReasonRetired         = "Retired"
	ReasonNotRetired      = "NotRetired"
	ReasonSanityOK        = "NoProblems"
	ReasonSanityProblem   = "SanityProblem"
	ReasonOriginLost      = "OriginLost"
	ReasonNotLost         = "NotLost"
	EventOriginLost       = "OriginLost"
	EventLostReleased     = "LostOriginReleased"
	EventClusterStale     = "ClusterStale"
	EventClusterRetired   = "ClusterRetired"
	EventClusterRejoined  = "ClusterRejoined"
	clusterSetManagedBy   = "coastguard"
	labelClusterSetReport = "coastguard.submariner.io/reported-by"
)

// ClusterObservation is what the local daemon knows about one cluster of
// the set, gathered from gossip membership, the replicated digest and the
// cluster's replicated cluster entry.
type ClusterObservation struct {
	ID    string
	Local bool
	// Alive: at least one member of the cluster is alive.
	Alive        bool
	AliveMembers int
	// LastSeen is when a member was last seen alive (zero: never).
	LastSeen time.Time
	Members  []v1.CoastguardClusterMember
	Leader   string
	Epoch    uint32
	Seq      uint64
	// Retired: the cluster was retired (decommission or reconnect timeout).
	Retired bool

	SoftwareVersion       string
	PodCIDRs              []string
	GlobalCIDRs           []string
	Labels                map[string]string
	SigningKeyFingerprint string
	// SanityProblems are messages of the sanity checks concerning the cluster.
	SanityProblems []string
	// LostPolicies are the MCNPs (namespace/name) of this cluster, lost
	// (retired without a decommission), still enforced here from their
	// last-known state.
	LostPolicies []string
}

// ClusterTransition is an Event-worthy change of a cluster's state.
type ClusterTransition struct {
	Reason  string // EventClusterStale, EventClusterRetired, EventClusterRejoined
	Warning bool
	Message string
}

// BuildClusterStatus computes the status of one CoastguardCluster from an
// observation, keeping lastTransitionTime of unchanged conditions from
// prev, and reports the transitions that deserve an Event. It is pure.
// A cluster is Stale when it is not alive and was last seen more than
// staleAfter before now (or never).
func BuildClusterStatus(reporter string, o ClusterObservation, prev []metav1.Condition, now time.Time, staleAfter time.Duration) (v1.CoastguardClusterStatus, []ClusterTransition) {
	st := clusterStatusFields(reporter, &o)
	conds := make([]metav1.Condition, len(prev))
	copy(conds, prev)
	set := func(t string, ok bool, reason, msg string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&conds, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg,
			LastTransitionTime: metav1.NewTime(now.UTC().Truncate(time.Second))})
	}
	if o.Alive {
		set(v1.ClusterConditionAlive, true, ReasonMemberAlive, fmt.Sprintf("%d member(s) alive", o.AliveMembers))
	} else {
		set(v1.ClusterConditionAlive, false, ReasonNoMemberAlive, "no member of the cluster is alive")
	}
	stale, reason, msg := staleCondition(&o, now, staleAfter)
	set(v1.ClusterConditionStale, stale, reason, msg)
	if o.Retired {
		set(v1.ClusterConditionRetired, true, ReasonRetired, "the cluster was retired; its entries were removed everywhere")
	} else {
		set(v1.ClusterConditionRetired, false, ReasonNotRetired, "")
	}
	if len(o.SanityProblems) > 0 {
		set(v1.ClusterConditionSanityOK, false, ReasonSanityProblem, strings.Join(o.SanityProblems, "; "))
	} else {
		set(v1.ClusterConditionSanityOK, true, ReasonSanityOK, "")
	}
	lost := len(o.LostPolicies) > 0
	if lost {
		set(v1.ClusterConditionOriginLost, true, ReasonOriginLost, fmt.Sprintf(
			"the cluster was retired without a decommission; %d of its MCNPs stay enforced here from their last-known state (%s); release them with `kubectl coastguard release-lost %s` (or decommission it)",
			len(o.LostPolicies), strings.Join(o.LostPolicies, ", "), o.ID))
	} else if meta.FindStatusCondition(prev, v1.ClusterConditionOriginLost) != nil {
		set(v1.ClusterConditionOriginLost, false, ReasonNotLost, "")
	}
	st.Conditions = conds
	return st, clusterTransitions(&o, prev, conds, stale, lost)
}

// clusterStatusFields is the status of a cluster without its conditions.
func clusterStatusFields(reporter string, o *ClusterObservation) v1.CoastguardClusterStatus {
	st := v1.CoastguardClusterStatus{
		ClusterID:             o.ID,
		ReportedBy:            reporter,
		Local:                 o.Local,
		AliveMembers:          int32(o.AliveMembers),
		Members:               append([]v1.CoastguardClusterMember(nil), o.Members...),
		Leader:                o.Leader,
		Epoch:                 int64(o.Epoch),
		Sequence:              int64(o.Seq),
		SoftwareVersion:       o.SoftwareVersion,
		PodCIDRs:              o.PodCIDRs,
		GlobalCIDRs:           o.GlobalCIDRs,
		Labels:                o.Labels,
		SigningKeyFingerprint: o.SigningKeyFingerprint,
	}
	sort.Slice(st.Members, func(i, j int) bool { return st.Members[i].Name < st.Members[j].Name })
	if o.Epoch != 0 || o.Seq != 0 {
		st.Version = fmt.Sprintf("%d.%d", o.Epoch, o.Seq)
	}
	if !o.LastSeen.IsZero() {
		st.LastSeen = &metav1.Time{Time: o.LastSeen.UTC().Truncate(time.Second)}
	}
	return st
}

// staleCondition is the Stale condition: a cluster neither alive nor
// retired that was never seen, or not for staleAfter.
func staleCondition(o *ClusterObservation, now time.Time, staleAfter time.Duration) (stale bool, reason, msg string) {
	switch {
	case o.Retired || o.Alive:
		return false, ReasonSeenRecently, ""
	case o.LastSeen.IsZero():
		return true, ReasonNeverSeen, "no member of the cluster was ever seen alive from here"
	case now.Sub(o.LastSeen) > staleAfter:
		return true, ReasonNotSeen, fmt.Sprintf("last seen %s ago (threshold %s); its state is kept and enforced until it is retired",
			now.Sub(o.LastSeen).Truncate(time.Second), staleAfter)
	}
	return false, ReasonSeenRecently, fmt.Sprintf("last seen %s ago", now.Sub(o.LastSeen).Truncate(time.Second))
}

// clusterTransitions are the Events of the change from the prev conditions
// to conds.
func clusterTransitions(o *ClusterObservation, prev, conds []metav1.Condition, stale, lost bool) []ClusterTransition {
	wasTrue := func(t string) bool { return meta.IsStatusConditionTrue(prev, t) }
	var tr []ClusterTransition
	if lost && !wasTrue(v1.ClusterConditionOriginLost) {
		tr = append(tr, ClusterTransition{EventOriginLost, true, fmt.Sprintf("cluster %s is lost: %d of its MCNPs stay enforced here from their last-known state until released",
			o.ID, len(o.LostPolicies))})
	}
	if !lost && wasTrue(v1.ClusterConditionOriginLost) {
		tr = append(tr, ClusterTransition{EventLostReleased, false, fmt.Sprintf("the MCNPs of lost cluster %s are no longer enforced here (released, decommissioned or rewritten by the cluster)", o.ID)})
	}
	if stale && !wasTrue(v1.ClusterConditionStale) {
		tr = append(tr, ClusterTransition{EventClusterStale, true, fmt.Sprintf("cluster %s turned stale: %s", o.ID,
			meta.FindStatusCondition(conds, v1.ClusterConditionStale).Message)})
	}
	if o.Retired && !wasTrue(v1.ClusterConditionRetired) {
		tr = append(tr, ClusterTransition{EventClusterRetired, true, fmt.Sprintf("cluster %s was retired from the cluster set", o.ID)})
	}
	if o.Alive && meta.FindStatusCondition(prev, v1.ClusterConditionAlive) != nil && !wasTrue(v1.ClusterConditionAlive) {
		tr = append(tr, ClusterTransition{EventClusterRejoined, false, fmt.Sprintf("cluster %s rejoined (%d member(s) alive)", o.ID, o.AliveMembers)})
	}
	return tr
}

// ClusterSetWriter keeps one CoastguardCluster per known cluster in the
// local apiserver. Only the leader calls Sync.
type ClusterSetWriter struct {
	client     dynamic.NamespaceableResourceInterface
	recorder   record.EventRecorder
	reporter   string
	staleAfter time.Duration
	log        *slog.Logger
}

// NewClusterSetWriter returns a writer; reporter is the local cluster ID.
func NewClusterSetWriter(dyn dynamic.Interface, recorder record.EventRecorder, reporter string, staleAfter time.Duration, log *slog.Logger) *ClusterSetWriter {
	if log == nil {
		log = slog.Default()
	}
	return &ClusterSetWriter{client: dyn.Resource(v1.CoastguardClusterGVR), recorder: recorder,
		reporter: reporter, staleAfter: staleAfter, log: log}
}

// Sync makes the CoastguardCluster objects equal to the observations:
// server-side applies each object whose status changed, records an Event
// per transition and deletes objects this writer owns for clusters no
// longer observed. It is level-triggered: it reads the current objects on
// every call.
func (w *ClusterSetWriter) Sync(ctx context.Context, obs []ClusterObservation, now time.Time) error {
	list, err := w.client.List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing coastguardclusters: %w", err)
	}
	existing := map[string]*v1.CoastguardCluster{}
	for i := range list.Items {
		var cc v1.CoastguardCluster
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, &cc); err != nil {
			w.log.Warn("undecodable CoastguardCluster; it will be overwritten", "name", list.Items[i].GetName(), "err", err)
			continue
		}
		existing[cc.Name] = &cc
	}
	var errs []error
	seen := map[string]bool{}
	for _, o := range obs {
		if o.ID == "" {
			continue
		}
		seen[o.ID] = true
		var prev []metav1.Condition
		old := existing[o.ID]
		if old != nil {
			prev = old.Status.Conditions
		}
		st, trans := BuildClusterStatus(w.reporter, o, prev, now, w.staleAfter)
		if old != nil && equality.Semantic.DeepEqual(old.Status, st) && old.Labels[LabelManagedByKey] == clusterSetManagedBy {
			continue
		}
		obj, err := w.apply(ctx, o.ID, st)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, t := range trans {
			typ := corev1.EventTypeNormal
			if t.Warning {
				typ = corev1.EventTypeWarning
			}
			w.recorder.Event(obj, typ, t.Reason, t.Message)
			w.log.Info("cluster-set transition", "remote_cluster", o.ID, "reason", t.Reason, "message", t.Message)
		}
	}
	for name, cc := range existing {
		if seen[name] || cc.Labels[LabelManagedByKey] != clusterSetManagedBy {
			continue
		}
		if err := w.client.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			errs = append(errs, fmt.Errorf("deleting coastguardcluster %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// LabelManagedByKey marks objects coastguard owns.
const LabelManagedByKey = enforce.LabelManagedBy

func (w *ClusterSetWriter) apply(ctx context.Context, name string, st v1.CoastguardClusterStatus) (*v1.CoastguardCluster, error) {
	obj := &v1.CoastguardCluster{
		TypeMeta: metav1.TypeMeta{APIVersion: v1.SchemeGroupVersion.String(), Kind: v1.KindCoastguardCluster},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			LabelManagedByKey: clusterSetManagedBy, labelClusterSetReport: w.reporter}},
	}
	u, err := toUnstructured(obj)
	if err != nil {
		return nil, err
	}
	opts := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	if _, err := w.client.Apply(ctx, name, u, opts); err != nil {
		return nil, fmt.Errorf("applying coastguardcluster %s: %w", name, err)
	}
	obj.Status = st
	u, err = toUnstructured(obj)
	if err != nil {
		return nil, err
	}
	unstructured.RemoveNestedField(u.Object, "metadata", "labels")
	out, err := w.client.Apply(ctx, name, u, opts, "status")
	if err != nil {
		return nil, fmt.Errorf("applying coastguardcluster %s status: %w", name, err)
	}
	var cc v1.CoastguardCluster
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(out.Object, &cc); err != nil {
		return nil, err
	}
	cc.TypeMeta = obj.TypeMeta
	return &cc, nil
}

func toUnstructured(obj any) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	unstructured.RemoveNestedField(m, "metadata", "creationTimestamp")
	return &unstructured.Unstructured{Object: m}, nil
}

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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"

	v1 "github.com/coastguard-mcnp/coastguard/api/v1"
	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Condition reasons written into MCNP status.
const (
	ReasonAllEnforced        = "AllClustersEnforced"
	ReasonPending            = "Pending"
	ReasonEnforcementFailed  = "EnforcementFailed"
	ReasonNoClustersSelected = "NoClustersSelected"
	// ReasonNamespaceMissing: some enforcing cluster has no namespace of
	// the policy's name, so it enforces nothing (not counted as enforced).
	ReasonNamespaceMissing = "NamespaceMissing"
	ReasonNotDegraded      = "AsExpected"
	ReasonMultipleDegraded = "MultipleReasons"
)

// AggregateInput is everything the status of one MCNP depends on.
type AggregateInput struct {
	// Generation is the MCNP's metadata.generation in its origin cluster.
	Generation int64
	// Reports maps enforcing cluster ID -> its report on this MCNP.
	Reports map[string]crdt.ReportValue
	// Enforcing lists the clusters the MCNP's clusterSelector selects.
	Enforcing []string
	// LabelsUnknown lists the clusters whose labels are unknown (not
	// arrived, or their cluster entry deleted) and that the
	// clusterSelector therefore does not select; the Enforced message
	// names them.
	LabelsUnknown []string
	// Previous conditions keep their lastTransitionTime when unchanged.
	Previous []metav1.Condition
	// Now stamps conditions that change.
	Now time.Time
}

// Aggregate computes an MCNP's status from the enforcing clusters'
// reports. A cluster counts as enforced when its report has observed the
// current generation without error and the cluster has the MCNP's
// namespace. A cluster lacking the namespace enforces nothing: it is not
// counted (ENFORCED k/n excludes it), its row says NamespaceMissing, and
// Ready/Enforced are False with reason NamespaceMissing naming it (unless
// a failure or a pending cluster is the stronger reason). Reports from
// clusters not in Enforcing are ignored.
func Aggregate(in AggregateInput) v1.MultiClusterNetworkPolicyStatus {
	clusters := append([]string(nil), in.Enforcing...)
	sort.Strings(clusters)
	clusters = dedupSorted(clusters)

	st := v1.MultiClusterNetworkPolicyStatus{ObservedGeneration: in.Generation}
	var t tally
	for _, c := range clusters {
		st.Clusters = append(st.Clusters, t.add(c, in.Reports, in.Generation))
	}
	n := len(clusters)
	st.EnforcedSummary = fmt.Sprintf("%d/%d", t.enforced, n)
	enf := t.enforcedCondition(n, in.Generation)
	if len(in.LabelsUnknown) > 0 {
		unknown := append([]string(nil), in.LabelsUnknown...)
		sort.Strings(unknown)
		enf.Message += "; not selected while their labels are unknown: " + strings.Join(dedupSorted(unknown), ", ")
	}
	ready := enf
	ready.Type = v1.ConditionReady
	st.Conditions = mergeConditions(in.Previous, in.Now, ready, enf, t.degradedCondition(in.Generation))
	return st
}

// tally sorts the enforcing clusters by the state of their reports.
type tally struct {
	enforced                           int
	pending, failed, missing, degraded []string
	degradedReasons                    map[string]bool
}

// add classifies cluster c and returns its status row.
func (t *tally) add(c string, reports map[string]crdt.ReportValue, gen int64) v1.ClusterEnforcementStatus {
	r, ok := reports[c]
	row := v1.ClusterEnforcementStatus{Cluster: c}
	if !ok {
		t.pending = append(t.pending, c)
		return row
	}
	row.ObservedGeneration = r.ObservedGeneration
	row.NetworkPolicies = r.NetworkPolicies
	row.RemotePeers = r.RemotePeers
	row.Error = r.Error
	row.Degraded = r.Degraded
	switch {
	case r.ObservedGeneration < gen:
		t.pending = append(t.pending, c)
	case r.Error != "":
		t.failed = append(t.failed, c+": "+r.Error)
	case r.SkippedNoNamespace:
		t.missing = append(t.missing, c)
		row.Degraded = ReasonNamespaceMissing + ": the namespace does not exist in this cluster; nothing is enforced there"
		t.addDegraded(c, ReasonNamespaceMissing)
	default:
		t.enforced++
		if r.Degraded != "" {
			t.addDegraded(c, r.Degraded)
		}
	}
	return row
}

func (t *tally) addDegraded(c, text string) {
	t.degraded = append(t.degraded, c+": "+text)
	if t.degradedReasons == nil {
		t.degradedReasons = map[string]bool{}
	}
	// "Reason: details" -> Reason
	reason, _, _ := strings.Cut(text, ":")
	t.degradedReasons[reason] = true
}

// enforcedCondition is the Enforced condition (Ready has the same state).
func (t *tally) enforcedCondition(n int, gen int64) metav1.Condition {
	enf := metav1.Condition{Type: v1.ConditionEnforced, ObservedGeneration: gen}
	missing := ""
	if len(t.missing) > 0 {
		missing = "; namespace missing in: " + strings.Join(t.missing, ", ")
	}
	switch {
	case n == 0:
		enf.Status, enf.Reason, enf.Message = metav1.ConditionFalse, ReasonNoClustersSelected, "the clusterSelector selects no cluster"
	case len(t.failed) > 0:
		enf.Status, enf.Reason = metav1.ConditionFalse, ReasonEnforcementFailed
		enf.Message = fmt.Sprintf("enforced in %d of %d clusters; failed: %s", t.enforced, n, strings.Join(t.failed, "; "))
		if len(t.pending) > 0 {
			enf.Message += "; pending: " + strings.Join(t.pending, ", ")
		}
		enf.Message += missing
	case len(t.pending) > 0:
		enf.Status, enf.Reason = metav1.ConditionFalse, ReasonPending
		enf.Message = fmt.Sprintf("enforced in %d of %d clusters; waiting for: %s", t.enforced, n, strings.Join(t.pending, ", ")) + missing
	case len(t.missing) > 0:
		enf.Status, enf.Reason = metav1.ConditionFalse, ReasonNamespaceMissing
		enf.Message = fmt.Sprintf("enforced in %d of %d clusters", t.enforced, n) + missing
	default:
		enf.Status, enf.Reason = metav1.ConditionTrue, ReasonAllEnforced
		enf.Message = fmt.Sprintf("enforced in all %d clusters", n)
	}
	return enf
}

func (t *tally) degradedCondition(gen int64) metav1.Condition {
	deg := metav1.Condition{Type: v1.ConditionDegraded, ObservedGeneration: gen}
	if len(t.degraded) == 0 {
		deg.Status, deg.Reason, deg.Message = metav1.ConditionFalse, ReasonNotDegraded, "no cluster reports degraded enforcement"
		return deg
	}
	deg.Status = metav1.ConditionTrue
	deg.Reason = ReasonMultipleDegraded
	if len(t.degradedReasons) == 1 {
		for r := range t.degradedReasons {
			deg.Reason = conditionReason(r)
		}
	}
	deg.Message = strings.Join(t.degraded, "; ")
	return deg
}

// mergeConditions sets the three conditions over the previous ones
// (keeping lastTransitionTime when unchanged) and keeps only our types, in
// a stable order.
func mergeConditions(previous []metav1.Condition, now time.Time, set ...metav1.Condition) []metav1.Condition {
	conds := make([]metav1.Condition, 0, 3)
	for _, c := range previous {
		conds = append(conds, *c.DeepCopy())
	}
	stamp := metav1.NewTime(now)
	for _, c := range set {
		c.LastTransitionTime = stamp
		meta.SetStatusCondition(&conds, c)
	}
	out := make([]metav1.Condition, 0, 3)
	for _, t := range []string{v1.ConditionReady, v1.ConditionEnforced, v1.ConditionDegraded} {
		if c := meta.FindStatusCondition(conds, t); c != nil {
			out = append(out, *c)
		}
	}
	return out
}

// conditionReason turns a free-form degraded reason into a valid condition
// reason (CamelCase letters, digits, underscores).
func conditionReason(s string) string {
	var b strings.Builder
	upper := true
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' && b.Len() > 0:
			if upper && r >= 'a' && r <= 'z' {
				r -= 'a' - 'A'
			}
			b.WriteRune(r)
			upper = false
		default:
			upper = true
		}
	}
	if b.Len() == 0 {
		return "Degraded"
	}
	out := b.String()
	if len(out) > 1024 {
		out = out[:1024]
	}
	return out
}

func dedupSorted(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// StatusFromUnstructured reads the status of an MCNP in unstructured form.
func StatusFromUnstructured(u *unstructured.Unstructured) (v1.MultiClusterNetworkPolicyStatus, error) {
	var st v1.MultiClusterNetworkPolicyStatus
	raw, ok := u.Object["status"].(map[string]any)
	if !ok {
		return st, nil
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &st); err != nil {
		return st, fmt.Errorf("decode status of %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return st, nil
}

// StatusWriterOptions configures a StatusWriter.
type StatusWriterOptions struct {
	// Lister is the MCNP cache (Inventory.MCNPLister()); the writer reads
	// current status from it to skip no-op updates.
	Lister cache.GenericLister
	// Recorder emits Events on MCNPs (NewEventRecorder, or a fake).
	Recorder record.EventRecorder
	// Gate, when set, must return true for any write to happen (wire it to
	// Elector.IsLeader: only the origin cluster's leader writes status).
	Gate   func() bool
	Logger *slog.Logger
}

// StatusWriter writes aggregated status into this cluster's MCNPs.
type StatusWriter struct {
	dyn  dynamic.Interface
	opts StatusWriterOptions
	log  *slog.Logger
}

// NewStatusWriter returns a writer using the dynamic client.
func NewStatusWriter(dyn dynamic.Interface, opts StatusWriterOptions) (*StatusWriter, error) {
	if dyn == nil || opts.Lister == nil || opts.Recorder == nil {
		return nil, errors.New("status writer: dynamic client, lister and recorder are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &StatusWriter{dyn: dyn, opts: opts, log: opts.Logger.With("component", "status")}, nil
}

// Policy returns the cached MCNP and its current status (for building the
// AggregateInput: generation and previous conditions).
func (w *StatusWriter) Policy(namespace, name string) (*unstructured.Unstructured, v1.MultiClusterNetworkPolicyStatus, error) {
	obj, err := w.opts.Lister.ByNamespace(namespace).Get(name)
	if err != nil {
		return nil, v1.MultiClusterNetworkPolicyStatus{}, err
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, v1.MultiClusterNetworkPolicyStatus{}, fmt.Errorf("unexpected cache type %T", obj)
	}
	st, err := StatusFromUnstructured(u)
	return u, st, err
}

// Update writes status into MCNP namespace/name when it differs from the
// current one, and records Events for clusters whose error or degraded
// reason newly appeared. It returns whether an update was sent. A policy
// that no longer exists is not an error.
func (w *StatusWriter) Update(ctx context.Context, namespace, name string, status v1.MultiClusterNetworkPolicyStatus) (bool, error) {
	if w.opts.Gate != nil && !w.opts.Gate() {
		return false, ErrNotLeader
	}
	cached, prev, err := w.Policy(namespace, name)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if equality.Semantic.DeepEqual(prev, status) {
		return false, nil
	}
	newStatus, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&status)
	if err != nil {
		return false, fmt.Errorf("encode status: %w", err)
	}
	client := w.dyn.Resource(MCNPResource).Namespace(namespace)
	obj := cached.DeepCopy()
	first := true
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			fresh, err := client.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			obj = fresh
		}
		first = false
		obj.Object["status"] = newStatus
		_, err := client.UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: FieldManager})
		return err
	})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		w.opts.Recorder.Eventf(cached, corev1.EventTypeWarning, "StatusUpdateFailed", "could not update status: %v", err)
		return false, fmt.Errorf("update status of %s/%s: %w", namespace, name, err)
	}
	w.recordTransitions(cached, prev, status)
	return true, nil
}

func (w *StatusWriter) recordTransitions(obj runtime.Object, prev, next v1.MultiClusterNetworkPolicyStatus) {
	old := make(map[string]v1.ClusterEnforcementStatus, len(prev.Clusters))
	for _, c := range prev.Clusters {
		old[c.Cluster] = c
	}
	for _, c := range next.Clusters {
		o := old[c.Cluster]
		if c.Error != "" && c.Error != o.Error {
			w.opts.Recorder.Eventf(obj, corev1.EventTypeWarning, ReasonEnforcementFailed, "cluster %s: %s", c.Cluster, c.Error)
		}
		if c.Degraded != "" && c.Degraded != o.Degraded {
			w.opts.Recorder.Eventf(obj, corev1.EventTypeWarning, "Degraded", "cluster %s: %s", c.Cluster, c.Degraded)
		}
	}
	was := meta.IsStatusConditionTrue(prev.Conditions, v1.ConditionEnforced)
	now := meta.IsStatusConditionTrue(next.Conditions, v1.ConditionEnforced)
	if now && !was {
		w.opts.Recorder.Eventf(obj, corev1.EventTypeNormal, ReasonAllEnforced, "enforced in %s clusters", next.EnforcedSummary)
	}
}

// NewEventRecorder returns a recorder that posts Events through client,
// and a function that stops it.
func NewEventRecorder(client kubernetes.Interface, component string) (record.EventRecorder, func()) {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	scheme := runtime.NewScheme()
	_ = v1.AddToScheme(scheme)
	return b.NewRecorder(scheme, corev1.EventSource{Component: component}), b.Shutdown
}

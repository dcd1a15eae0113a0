package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	networkinginformers "k8s.io/client-go/informers/networking/v1"
	"k8s.io/client-go/kubernetes"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/internal/metricsreg"
)

// Names shared with enforce/, which declares them: generated
// NetworkPolicies carry the managed-by label, the origin annotation and a
// content hash annotation.
const (
	ManagedByLabel        = enforce.LabelManagedBy
	ManagedByValue        = enforce.ManagedByValue
	ContentHashAnnotation = enforce.AnnotationContentHash
	// OriginAnnotation holds "<cluster>/<namespace>/<name>" of the MCNP a
	// generated NetworkPolicy comes from.
	OriginAnnotation = enforce.AnnotationOrigin
	// FieldManager is the server-side apply field manager.
	FieldManager = "coastguard"
)

type cachedSelector struct {
	key, value string
	sel        labels.Selector
}

var managedSel atomic.Pointer[cachedSelector]

// ManagedSelector selects the NetworkPolicies carrying coastguard's
// managed-by label. The label alone does not make a policy coastguard's:
// see Owned.
func ManagedSelector() labels.Selector {
	k, v := ManagedByLabel, ManagedByValue
	if c := managedSel.Load(); c != nil && c.key == k && c.value == v {
		return c.sel
	}
	c := &cachedSelector{key: k, value: v, sel: labels.SelectorFromSet(labels.Set{k: v})}
	managedSel.Store(c)
	return c.sel
}

// IsManaged reports whether a NetworkPolicy carries the managed-by label.
func IsManaged(np *networkingv1.NetworkPolicy) bool {
	return np != nil && ManagedSelector().Matches(labels.Set(np.Labels))
}

// WrittenByUs reports whether coastguard's field manager has server-side
// applied the object (its managedFields hold an Apply entry of
// FieldManager). The API server records it; a policy created by anyone else
// (kubectl create/apply, another controller) never has it, whatever labels
// it carries.
func WrittenByUs(np *networkingv1.NetworkPolicy) bool {
	if np == nil {
		return false
	}
	for _, mf := range np.ManagedFields {
		if mf.Manager == FieldManager && mf.Operation == metav1.ManagedFieldsOperationApply {
			return true
		}
	}
	return false
}

// Owned is the ownership decision for a live NetworkPolicy: coastguard owns
// it when its field manager wrote it and either the policy is desired under
// this name (then labels and annotations are whatever coastguard must
// restore) or it still carries an origin annotation (an undesired policy is
// only ever deleted when it says where it came from). A policy that carries
// the managed-by label but was never written by coastguard is not owned:
// it is "foreign" and left alone.
func Owned(desired, live *networkingv1.NetworkPolicy) bool {
	if live == nil || !WrittenByUs(live) {
		return false
	}
	return desired != nil || live.Annotations[OriginAnnotation] != ""
}

// Action is what the applier does for one NetworkPolicy name.
type Action int

const (
	// ActionNone does nothing: live already matches, or nothing is wanted
	// and nothing of ours exists, or a live object of ours is terminating.
	ActionNone Action = iota
	// ActionApply server-side applies the desired object (create, content
	// update, drift repair or re-adoption of a policy whose label was
	// removed).
	ActionApply
	// ActionDelete deletes the live generated object (no longer desired).
	ActionDelete
	// ActionConflict never touches a user-authored object without our
	// label that holds the desired name.
	ActionConflict
	// ActionForeign never touches, and reports, an object that carries the
	// managed-by label but that coastguard never wrote.
	ActionForeign
	// ActionHold defers a change that would delete or shrink a generated
	// policy while the empty-view gate is closed; it waits for the gate.
	ActionHold
)

func (a Action) String() string {
	switch a {
	case ActionNone:
		return "none"
	case ActionApply:
		return "apply"
	case ActionDelete:
		return "delete"
	case ActionConflict:
		return "conflict"
	case ActionForeign:
		return "foreign"
	case ActionHold:
		return "hold"
	}
	return fmt.Sprintf("action(%d)", int(a))
}

// DecideGated is the per-name decision. hold is the empty-view gate: while
// it is set nothing is deleted and no generated policy's content is
// replaced by content that could allow less (see Widens); creating a missing
// policy, widening one (a new remote pod's ipBlock, say), and restoring a
// hand-edited one to the content coastguard last wrote (same content hash)
// still happen.
func DecideGated(desired, live *networkingv1.NetworkPolicy, hold bool) Action {
	if live != nil && live.DeletionTimestamp != nil {
		return ActionNone // re-evaluated when the delete event arrives
	}
	owned := Owned(desired, live)
	switch {
	case desired == nil && live == nil:
		return ActionNone
	case desired == nil:
		switch {
		case owned && hold:
			return ActionHold
		case owned:
			return ActionDelete
		case IsManaged(live):
			return ActionForeign
		}
		return ActionNone
	case live == nil:
		return ActionApply
	case !owned && IsManaged(live):
		return ActionForeign
	case !owned:
		return ActionConflict
	case !Drifted(desired, live):
		return ActionNone
	case hold && live.Annotations[ContentHashAnnotation] != desired.Annotations[ContentHashAnnotation] && !Widens(desired, live):
		return ActionHold
	}
	return ActionApply
}

// Widens reports whether applying desired over live can only add to what
// live allows: the same pods selected with the same policy types, and every
// live rule kept by a desired rule with the same ports whose peers include
// all of the live rule's peers (a rule with no peers allows every peer, so
// only another rule with no peers keeps it). It is a sufficient test, not a
// complete one: an update it cannot prove wider is held by the gate.
func Widens(desired, live *networkingv1.NetworkPolicy) bool {
	d, l := NormalizedSpec(&desired.Spec), NormalizedSpec(&live.Spec)
	if !sameNormalizedSelection(d, l) {
		return false
	}
	for _, lr := range l.Ingress {
		if !slices.ContainsFunc(d.Ingress, func(dr networkingv1.NetworkPolicyIngressRule) bool {
			return keepsRule(dr.Ports, lr.Ports, dr.From, lr.From)
		}) {
			return false
		}
	}
	for _, lr := range l.Egress {
		if !slices.ContainsFunc(d.Egress, func(dr networkingv1.NetworkPolicyEgressRule) bool {
			return keepsRule(dr.Ports, lr.Ports, dr.To, lr.To)
		}) {
			return false
		}
	}
	return true
}

func keepsRule(dPorts, lPorts []networkingv1.NetworkPolicyPort, dPeers, lPeers []networkingv1.NetworkPolicyPeer) bool {
	if !apiequality.Semantic.DeepEqual(dPorts, lPorts) {
		return false
	}
	if len(dPeers) == 0 || len(lPeers) == 0 {
		return len(dPeers) == 0
	}
	for _, lp := range lPeers {
		if !slices.ContainsFunc(dPeers, func(dp networkingv1.NetworkPolicyPeer) bool { return apiequality.Semantic.DeepEqual(dp, lp) }) {
			return false
		}
	}
	return true
}

// Drifted reports whether a live policy differs from the desired one in
// anything coastguard owns: a desired label or annotation missing or
// changed, or a spec that is not semantically equal once the API server's
// defaults (protocol TCP, policyTypes) are applied to both.
func Drifted(desired, live *networkingv1.NetworkPolicy) bool {
	for k, v := range desired.Labels {
		if got, ok := live.Labels[k]; !ok || got != v {
			return true
		}
	}
	for k, v := range desired.Annotations {
		if got, ok := live.Annotations[k]; !ok || got != v {
			return true
		}
	}
	return !apiequality.Semantic.DeepEqual(NormalizedSpec(&desired.Spec), NormalizedSpec(&live.Spec))
}

// NormalizedSpec applies the NetworkPolicy defaults the API server applies
// (port protocol TCP, policyTypes), so a desired spec compares equal to its
// stored form. It returns a copy.
func NormalizedSpec(in *networkingv1.NetworkPolicySpec) *networkingv1.NetworkPolicySpec {
	s := in.DeepCopy()
	tcp := corev1.ProtocolTCP
	fix := func(ports []networkingv1.NetworkPolicyPort) {
		for i := range ports {
			if ports[i].Protocol == nil {
				ports[i].Protocol = &tcp
			}
		}
	}
	for i := range s.Ingress {
		fix(s.Ingress[i].Ports)
	}
	for i := range s.Egress {
		fix(s.Egress[i].Ports)
	}
	if len(s.PolicyTypes) == 0 {
		s.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		if len(s.Egress) > 0 {
			s.PolicyTypes = append(s.PolicyTypes, networkingv1.PolicyTypeEgress)
		}
	}
	return s
}

// ValidateDesired checks that a generated NetworkPolicy can be applied and
// later found again: it needs a name, a namespace, the managed-by label, an
// origin annotation and a non-empty content hash.
func ValidateDesired(np *networkingv1.NetworkPolicy) error {
	switch {
	case np.Name == "" || np.Namespace == "":
		return fmt.Errorf("desired NetworkPolicy %q in namespace %q: name and namespace are required", np.Name, np.Namespace)
	case !IsManaged(np):
		return fmt.Errorf("desired NetworkPolicy %s/%s lacks label %s=%s", np.Namespace, np.Name, ManagedByLabel, ManagedByValue)
	case np.Annotations[OriginAnnotation] == "":
		return fmt.Errorf("desired NetworkPolicy %s/%s lacks annotation %s", np.Namespace, np.Name, OriginAnnotation)
	case np.Annotations[ContentHashAnnotation] == "":
		return fmt.Errorf("desired NetworkPolicy %s/%s lacks annotation %s", np.Namespace, np.Name, ContentHashAnnotation)
	}
	if msgs := validation.IsDNS1123Subdomain(np.Name); len(msgs) > 0 {
		return fmt.Errorf("desired NetworkPolicy %s/%s: invalid name: %s", np.Namespace, np.Name, strings.Join(msgs, "; "))
	}
	return nil
}

type desiredIndex struct {
	want map[types.NamespacedName]*networkingv1.NetworkPolicy
	// broken names: an invalid or colliding desired object claims them;
	// nothing is applied or deleted under them.
	broken   map[types.NamespacedName]struct{}
	rejected map[string][]string // origin -> reasons
}

// indexDesired is what a desired set holding exactly desired installs (the
// rules are desiredSet's).
func indexDesired(desired []networkingv1.NetworkPolicy) desiredIndex {
	set := newDesiredSet()
	set.apply(groupDesired(desired))
	idx := desiredIndex{
		want:     make(map[types.NamespacedName]*networkingv1.NetworkPolicy, len(set.want)),
		broken:   map[types.NamespacedName]struct{}{},
		rejected: set.rejected,
	}
	for _, np := range set.want {
		idx.want[types.NamespacedName{Namespace: np.Namespace, Name: np.Name}] = np
	}
	for k := range set.broken {
		ns, name, _ := strings.Cut(k, "/")
		idx.broken[types.NamespacedName{Namespace: ns, Name: name}] = struct{}{}
	}
	return idx
}

// groupDesired groups a desired list by the policy of each object's origin
// annotation (the zero PolicyRef for one that is no reference: such an
// object is refused anyway), pointing into desired.
func groupDesired(desired []networkingv1.NetworkPolicy) map[enforce.PolicyRef][]*networkingv1.NetworkPolicy {
	out := map[enforce.PolicyRef][]*networkingv1.NetworkPolicy{}
	for i := range desired {
		ref, _ := enforce.ParsePolicyRef(desired[i].Annotations[OriginAnnotation])
		out[ref] = append(out[ref], &desired[i])
	}
	return out
}

// ApplyBody is the server-side apply request body for a desired object:
// only identity, labels, annotations, owner references and spec, so the
// coastguard field manager owns exactly those fields.
func ApplyBody(np *networkingv1.NetworkPolicy) ([]byte, error) {
	obj := &networkingv1.NetworkPolicy{
		TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{
			Name:            np.Name,
			Namespace:       np.Namespace,
			Labels:          np.Labels,
			Annotations:     np.Annotations,
			OwnerReferences: np.OwnerReferences,
		},
		Spec: np.Spec,
	}
	return json.Marshal(obj)
}

// ApplierMetrics are the applier's Prometheus collectors.
type ApplierMetrics struct {
	Applies   prometheus.Counter
	Deletes   prometheus.Counter
	Conflicts prometheus.Counter
	Repairs   prometheus.Counter
	Foreign   prometheus.Gauge
	Held      prometheus.Gauge
	Unproven  prometheus.Gauge
	Rejected  prometheus.Counter
	Errors    *prometheus.CounterVec   // label op = apply|delete|plan
	Duration  *prometheus.HistogramVec // label op = apply|delete
}

// NewApplierMetrics creates the collectors and registers them with reg
// (nil: not registered).
func NewApplierMetrics(reg prometheus.Registerer) (*ApplierMetrics, error) {
	m := &ApplierMetrics{
		Applies: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coastguard_networkpolicy_applies_total", Help: "Generated NetworkPolicies applied (server-side apply)."}),
		Deletes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coastguard_networkpolicy_deletes_total", Help: "Generated NetworkPolicies deleted because no longer desired."}),
		Conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coastguard_networkpolicy_conflicts_total", Help: "Desired NetworkPolicies skipped because a user-authored object holds the name."}),
		Repairs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coastguard_networkpolicy_drift_repairs_total", Help: "Generated NetworkPolicies re-applied because their live spec, labels or annotations drifted (hand edits, removed label)."}),
		Foreign: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "coastguard_networkpolicy_foreign", Help: "NetworkPolicies carrying coastguard's managed-by label that coastguard never wrote (left alone)."}),
		Held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "coastguard_networkpolicy_held", Help: "Deletes or content changes of generated NetworkPolicies held back by the empty-view gate."}),
		Unproven: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "coastguard_mcnp_unproven", Help: "MCNPs whose replicated entry is above its origin's proven watermark (not yet confirmed by the origin's signed state mark); their generated NetworkPolicies are enforced no wider than both the proven and the unproven version (isolation-only when absent)."}),
		Rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "coastguard_networkpolicy_rejected_total", Help: "Desired NetworkPolicies refused (invalid or colliding name); only their own MCNP is affected."}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "coastguard_networkpolicy_errors_total", Help: "Failed NetworkPolicy operations."}, []string{"op"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "coastguard_networkpolicy_op_duration_seconds", Help: "Duration of NetworkPolicy API operations.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}, []string{"op"}),
	}
	if err := metricsreg.All(reg, m.Applies, m.Deletes, m.Conflicts, m.Repairs, m.Foreign, m.Held, m.Unproven, m.Rejected, m.Errors, m.Duration); err != nil {
		return nil, fmt.Errorf("applier metrics: %w", err)
	}
	return m, nil
}

// ApplierOptions configures an Applier.
type ApplierOptions struct {
	// Registerer receives the metrics; nil leaves them unregistered.
	Registerer prometheus.Registerer
	// RateLimiter backs off failing keys; nil uses the client-go default
	// (per-item exponential 5ms..1000s plus an overall token bucket).
	RateLimiter workqueue.TypedRateLimiter[string]
	Logger      *slog.Logger
	// Workers is the number of concurrent API workers (default 2).
	Workers int
	// Recorder, when set, receives a Warning Event on every foreign
	// NetworkPolicy (managed-by label, never written by coastguard).
	Recorder record.EventRecorder
	// OnFailure, when set, is called with an origin (OriginAnnotation value)
	// whenever that origin's failures (Failures) change.
	OnFailure func(origin string)
}

// Applier makes the cluster's generated NetworkPolicies match a desired
// set. It is level-triggered: every add, update or delete event of a
// NetworkPolicy that is desired, labelled as coastguard's or written by
// coastguard's field manager queues its name, and the worker compares the
// live object with the desired one (DecideGated). It server-side applies missing
// and drifted objects (hand edits of spec, labels or annotations, a removed
// managed-by label), deletes owned objects no longer desired, and never
// touches objects coastguard did not write (Owned). Keys (namespace/name)
// go through a rate-limited workqueue, so failures back off. Only the
// leader should Run it; SetDesired and SetHold may be called at any time.
type Applier struct {
	client    kubernetes.Interface
	lister    networkinglisters.NetworkPolicyLister
	synced    cache.InformerSynced
	metrics   *ApplierMetrics
	limiter   workqueue.TypedRateLimiter[string]
	log       *slog.Logger
	workers   int
	recorder  record.EventRecorder
	onFailure func(string)

	mu sync.Mutex
	// set is the desired objects by policy; set.want (by namespace/name)
	// is what is installed, set.broken the names claimed by refused
	// desired objects, set.rejected the refusals by origin.
	set   *desiredSet
	queue workqueue.TypedRateLimitingInterface[string]
	hold  bool

	// Settled bookkeeping, all guarded by mu: keys queued but not yet taken
	// by a worker, keys being processed, keys waiting for a retry.
	queued   map[string]struct{}
	inflight int
	failing  map[string]struct{}
	started  atomic.Bool

	// Failing API operations (guarded by mu), by origin then key.
	opErrors map[string]map[string]string
	foreign  map[string]struct{}
	held     map[string]struct{}
	// unproven MCNPs (origin/namespace/name, SetUnproven): their generated
	// objects are neither created, changed nor deleted; frozenKeys are the
	// object keys left alone for that, re-checked when the set changes.
	unproven   map[string]struct{}
	frozenKeys map[string]string // object key -> its MCNP
	isUnproven func(ref string) bool
}

// NewApplier builds an applier on a NetworkPolicy informer (it must watch
// all NetworkPolicies, not only labelled ones, so name conflicts with
// user-authored objects and generated objects whose label was removed are
// seen). The informer's event handlers are added here; start the factory
// as usual.
func NewApplier(client kubernetes.Interface, inf networkinginformers.NetworkPolicyInformer, opts ApplierOptions) (*Applier, error) {
	m, err := NewApplierMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	if opts.RateLimiter == nil {
		opts.RateLimiter = workqueue.DefaultTypedControllerRateLimiter[string]()
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Workers <= 0 {
		opts.Workers = 2
	}
	a := &Applier{
		client: client, lister: inf.Lister(), synced: inf.Informer().HasSynced,
		metrics: m, limiter: opts.RateLimiter, log: opts.Logger.With("component", "applier"),
		workers: opts.Workers, recorder: opts.Recorder, onFailure: opts.OnFailure,
		set:      newDesiredSet(),
		failing:  make(map[string]struct{}),
		queued:   make(map[string]struct{}),
		opErrors: map[string]map[string]string{},
		foreign:  map[string]struct{}{},
		held:     map[string]struct{}{},

		unproven:   map[string]struct{}{},
		frozenKeys: map[string]string{},
	}
	_, err = inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    a.onEvent,
		UpdateFunc: func(_, n any) { a.onEvent(n) },
		DeleteFunc: a.onEvent,
	})
	if err != nil {
		return nil, fmt.Errorf("applier: add event handler: %w", err)
	}
	return a, nil
}

func (a *Applier) onEvent(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	np, ok := obj.(*networkingv1.NetworkPolicy)
	if !ok {
		return
	}
	key := np.Namespace + "/" + np.Name
	a.mu.Lock()
	defer a.mu.Unlock()
	_, wanted := a.set.want[key]
	_, wasForeign := a.foreign[key]
	if !wanted && !wasForeign && !IsManaged(np) && !WrittenByUs(np) {
		return // a user object we have no interest in
	}
	a.enqueueLocked(key)
}

// enqueueLocked queues key if the applier runs; a.mu must be held.
func (a *Applier) enqueueLocked(key string) {
	if a.queue == nil {
		return
	}
	a.queued[key] = struct{}{}
	a.queue.Add(key)
}

// SetDesired replaces the desired set: it hands over, as ApplyChanges
// does, the policies (by origin annotation) whose objects differ from
// those held (by namespace, name, labels and annotations: the content hash
// covers the spec), and those no longer present.
func (a *Applier) SetDesired(desired []networkingv1.NetworkPolicy) error {
	byGroup := groupDesired(desired)
	a.mu.Lock()
	changes := map[enforce.PolicyRef][]*networkingv1.NetworkPolicy{}
	for g, nps := range byGroup {
		if !sameObjects(a.set.groups[g], nps) {
			changes[g] = deepCopies(nps)
		}
	}
	for g := range a.set.groups {
		if _, ok := byGroup[g]; !ok {
			changes[g] = nil
		}
	}
	return a.applyLocked(changes)
}

// ApplyChanges replaces the generated objects of the given policies (an
// empty list: the policy generates nothing any more, or is gone); the
// objects of every other policy stay as handed over before. Invalid or
// colliding objects are refused one by one (desiredSet): their names are
// neither applied nor deleted, their origins are reported by Failures, and
// the returned error lists every refusal in force; every other object is
// installed. Only the names the changed policies claim or claimed are
// revisited; those whose installed object changed, appeared or disappeared
// are queued when the applier runs.
func (a *Applier) ApplyChanges(changes map[enforce.PolicyRef][]networkingv1.NetworkPolicy) error {
	copied := make(map[enforce.PolicyRef][]*networkingv1.NetworkPolicy, len(changes))
	for g, nps := range changes {
		var cp []*networkingv1.NetworkPolicy
		for i := range nps {
			cp = append(cp, nps[i].DeepCopy())
		}
		copied[g] = cp
	}
	a.mu.Lock()
	return a.applyLocked(copied)
}

// applyLocked applies changes (objects the applier now owns) to the desired
// set, queues what changed and notifies the origins whose failures changed.
// a.mu is held; applyLocked releases it.
func (a *Applier) applyLocked(changes map[enforce.PolicyRef][]*networkingv1.NetworkPolicy) error {
	eff := a.set.apply(changes)
	if a.queue != nil {
		for _, k := range eff.queue {
			a.enqueueLocked(k)
		}
		a.enqueueClearedLocked(eff.cleared)
	}
	errs := a.rejections(a.set.rejected)
	a.mu.Unlock()
	a.notify(eff.origins)
	return errors.Join(errs...)
}

func deepCopies(nps []*networkingv1.NetworkPolicy) []*networkingv1.NetworkPolicy {
	out := make([]*networkingv1.NetworkPolicy, len(nps))
	for i, np := range nps {
		out[i] = np.DeepCopy()
	}
	return out
}

// sameObjects reports whether two object lists of a policy are the same
// for the applier: the same names, labels and annotations in order.
func sameObjects(held, next []*networkingv1.NetworkPolicy) bool {
	return slices.EqualFunc(held, next, func(h, n *networkingv1.NetworkPolicy) bool {
		return h.Namespace == n.Namespace && h.Name == n.Name &&
			maps.Equal(h.Labels, n.Labels) && maps.Equal(h.Annotations, n.Annotations)
	})
}

// rejections counts the refused desired objects and returns one error per
// reason, by origin.
func (a *Applier) rejections(rejected map[string][]string) []error {
	var errs []error
	origins := make([]string, 0, len(rejected))
	for o := range rejected {
		origins = append(origins, o)
	}
	sort.Strings(origins)
	for _, o := range origins {
		for _, r := range rejected[o] {
			errs = append(errs, fmt.Errorf("%s: %s", o, r))
			a.metrics.Rejected.Inc()
		}
	}
	if len(errs) > 0 {
		a.metrics.Errors.WithLabelValues("plan").Inc()
	}
	return errs
}

// enqueueClearedLocked queues the live objects of origins no longer
// refused (their held-back deletes can go ahead). a.mu is held.
func (a *Applier) enqueueClearedLocked(cleared []string) {
	if len(cleared) == 0 {
		return
	}
	live, err := a.lister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, np := range live {
		if slices.Contains(cleared, np.Annotations[OriginAnnotation]) {
			a.enqueueLocked(np.Namespace + "/" + np.Name)
		}
	}
}

func (a *Applier) notify(origins map[string]struct{}) {
	if a.onFailure == nil {
		return
	}
	for o := range origins {
		if o != "" {
			a.onFailure(o)
		}
	}
}

// Failures returns, for every origin (OriginAnnotation value) with a
// problem, why: refused desired objects and API operations that are
// failing (and being retried). An empty map means every desired object of
// every origin is applied or on its way.
func (a *Applier) Failures() map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]string{}
	for o, rs := range a.set.rejected {
		out[o] = strings.Join(rs, "; ")
	}
	for o, byKey := range a.opErrors {
		keys := make([]string, 0, len(byKey))
		for k := range byKey {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if out[o] != "" {
				out[o] += "; "
			}
			out[o] += byKey[k]
		}
	}
	return out
}

// SetHold closes (true) or opens (false) the empty-view gate: while closed,
// no generated policy is deleted or has its content replaced (DecideGated).
// Opening it queues every desired and held key.
func (a *Applier) SetHold(hold bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.hold == hold {
		return
	}
	a.hold = hold
	if !hold {
		for k := range a.held {
			a.enqueueLocked(k)
		}
		for k := range a.set.want {
			a.enqueueLocked(k)
		}
		clear(a.held)
		a.metrics.Held.Set(0)
	}
}

// SetUnproven names the MCNPs (origin/namespace/name, the origin
// annotation of what they generate) whose replicated entry lies above its
// origin's proven watermark: it arrived in a frame whose origin-signed
// state mark this replica has not reproduced, so it may be a key holder's
// resurrection or a fragment of a skipped range (docs/SECURITY.md, issue
// 29). Their generated NetworkPolicies are not deleted, and enforced no
// wider than both the proven and the unproven version (isolateUnproven)
// until the entry is proven or gone. Objects left alone before are
// re-checked when the set changes.
func (a *Applier) SetUnproven(refs map[string]struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !maps.Equal(a.unproven, refs) {
		a.unproven = maps.Clone(refs)
		a.metrics.Unproven.Set(float64(len(refs)))
	}
	for k, ref := range a.frozenKeys {
		if _, still := refs[ref]; !still {
			a.enqueueLocked(k) // re-decided, with the decision-time check
			delete(a.frozenKeys, k)
		}
	}
}

// SetUnprovenCheck installs the check frozen asks at decision time, so
// that an entry merged between two SetUnproven calls is never acted on.
// It must not call into the applier.
func (a *Applier) SetUnprovenCheck(fn func(ref string) bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.isUnproven = fn
}

// frozen reports whether the object key of the MCNP origin (its origin
// annotation) is left alone because that MCNP is unproven, and records it
// for SetUnproven.
func (a *Applier) frozen(key, origin string, act Action) bool {
	if act != ActionApply && act != ActionDelete && act != ActionHold {
		return false
	}
	a.mu.Lock()
	_, ok := a.unproven[origin]
	check := a.isUnproven
	a.mu.Unlock()
	if !ok && check != nil {
		ok = check(origin)
	}
	if !ok {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, was := a.frozenKeys[key]; !was {
		a.log.Info("MCNP entry not proven by its origin's signed state mark yet; its generated NetworkPolicy is not deleted or widened", "key", key, "origin", origin)
	}
	a.frozenKeys[key] = origin
	return true
}

// LiveOrigins lists the origin clusters (first segment of the origin
// annotation) of the live NetworkPolicies coastguard wrote, from the
// informer cache: a daemon whose store is empty still knows which clusters
// it enforces policies of.
func (a *Applier) LiveOrigins() []string {
	live, err := a.lister.List(labels.Everything())
	if err != nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, np := range live {
		if !WrittenByUs(np) {
			continue
		}
		o := np.Annotations[OriginAnnotation]
		if i := strings.IndexByte(o, '/'); i > 0 && !seen[o[:i]] {
			seen[o[:i]] = true
			out = append(out, o[:i])
		}
	}
	sort.Strings(out)
	return out
}

// Held is the number of names whose delete or content change waits for
// the gate.
func (a *Applier) Held() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.held)
}

// Settled reports whether the applier is running, its informer has synced,
// and no work is queued, in flight or waiting for a retry (used for
// readiness: "first enforcement done"). Held changes do not count as work.
func (a *Applier) Settled() bool {
	if !a.started.Load() {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.queue != nil && len(a.queued) == 0 && a.inflight == 0 && len(a.failing) == 0
}

// Run reconciles until ctx is done. It waits for the informer, queues every
// desired, labelled, coastguard-written and broken key once, then processes
// the queue with the configured number of workers. It may be called again
// after it returns (a new leadership term).
func (a *Applier) Run(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), a.synced) {
		return fmt.Errorf("applier: NetworkPolicy informer did not sync: %w", ctx.Err())
	}
	q := workqueue.NewTypedRateLimitingQueueWithConfig(a.limiter, workqueue.TypedRateLimitingQueueConfig[string]{Name: "coastguard_networkpolicies"})
	live, err := a.lister.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("applier: list NetworkPolicies: %w", err)
	}
	a.mu.Lock()
	a.queue = q
	for k := range a.set.want {
		a.enqueueLocked(k)
	}
	for _, np := range live {
		if IsManaged(np) || WrittenByUs(np) {
			a.enqueueLocked(np.Namespace + "/" + np.Name)
		}
	}
	a.mu.Unlock()
	a.started.Store(true)
	defer func() {
		a.started.Store(false)
		a.mu.Lock()
		a.queue = nil
		clear(a.failing)
		clear(a.queued)
		clear(a.held)
		a.metrics.Held.Set(0)
		a.inflight = 0
		a.mu.Unlock()
	}()

	var wg sync.WaitGroup
	for i := 0; i < a.workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for a.processNext(ctx, q) {
			}
		}()
	}
	<-ctx.Done()
	q.ShutDown()
	wg.Wait()
	return nil
}

func (a *Applier) processNext(ctx context.Context, q workqueue.TypedRateLimitingInterface[string]) bool {
	key, quit := q.Get()
	if quit {
		return false
	}
	a.mu.Lock()
	delete(a.queued, key)
	a.inflight++
	a.mu.Unlock()
	defer q.Done(key)
	origin, err := a.reconcile(ctx, key)
	var stuck *blockedError
	a.mu.Lock()
	a.inflight--
	changed := ""
	if errors.As(err, &stuck) {
		// Not retried: the key is re-queued by the blocking object's own
		// events. Reported against the origin.
		changed = a.recordOpErrorLocked(origin, key, err)
		delete(a.failing, key)
		q.Forget(key)
	} else if err != nil {
		if ctx.Err() != nil {
			a.mu.Unlock()
			return true
		}
		a.log.Warn("NetworkPolicy reconcile failed; will retry", "key", key, "origin", origin, "retries", q.NumRequeues(key), "err", err)
		a.failing[key] = struct{}{}
		changed = a.recordOpErrorLocked(origin, key, err)
		q.AddRateLimited(key)
	} else {
		delete(a.failing, key)
		changed = a.clearOpErrorsLocked(key)
		q.Forget(key)
	}
	a.mu.Unlock()
	if changed != "" {
		a.notify(map[string]struct{}{changed: {}})
	}
	return true
}

// recordOpErrorLocked records err as origin's failure on key; it returns
// origin when that changes what is reported ("" otherwise). a.mu is held.
func (a *Applier) recordOpErrorLocked(origin, key string, err error) string {
	if origin == "" {
		return ""
	}
	changed := ""
	if a.opErrors[origin] == nil {
		a.opErrors[origin] = map[string]string{}
	}
	if a.opErrors[origin][key] != err.Error() {
		changed = origin
	}
	a.opErrors[origin][key] = err.Error()
	return changed
}

// clearOpErrorsLocked forgets key's failures; it returns the (last) origin
// whose report changed ("" if none). a.mu is held.
func (a *Applier) clearOpErrorsLocked(key string) string {
	changed := ""
	for o, byKey := range a.opErrors {
		if _, ok := byKey[key]; ok {
			delete(byKey, key)
			if len(byKey) == 0 {
				delete(a.opErrors, o)
			}
			changed = o
		}
	}
	return changed
}

// blockedError is a desired object that cannot be applied because an object
// coastguard did not write holds its name.
type blockedError struct{ msg string }

func (e *blockedError) Error() string { return e.msg }

// reconcile handles one key and returns the origin it concerns (for error
// attribution).
func (a *Applier) reconcile(ctx context.Context, key string) (string, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return "", nil // malformed keys never become valid; drop
	}
	a.mu.Lock()
	desired := a.set.want[key]
	_, broken := a.set.broken[key]
	hold := a.hold
	a.mu.Unlock()
	live, err := a.lister.NetworkPolicies(ns).Get(name)
	if apierrors.IsNotFound(err) {
		live, err = nil, nil
	}
	if err != nil {
		return "", err
	}
	origin := ""
	if desired != nil {
		origin = desired.Annotations[OriginAnnotation]
	} else if live != nil {
		origin = live.Annotations[OriginAnnotation]
	}
	act, frozen := a.decide(key, origin, desired, live, broken, hold)
	if frozen {
		return origin, a.isolateUnproven(ctx, key, origin, act, desired, live, broken, hold)
	}
	wasHeld, wasForeign := a.track(key, act)
	return origin, a.act(ctx, key, origin, act, desired, live, wasHeld, wasForeign)
}

// decide is DecideGated, except that a name a refused desired object
// claims is left as it is, and a refused origin's last good objects are
// not deleted; frozen: the MCNP is unproven, so nothing is done at all.
func (a *Applier) decide(key, origin string, desired, live *networkingv1.NetworkPolicy, broken, hold bool) (act Action, frozen bool) {
	refused := false
	if live != nil {
		a.mu.Lock()
		_, refused = a.set.rejected[live.Annotations[OriginAnnotation]]
		a.mu.Unlock()
	}
	act = DecideGated(desired, live, hold)
	if a.frozen(key, origin, act) {
		return act, true
	}
	if broken && (act == ActionDelete || act == ActionApply) {
		act = ActionNone // a refused desired object claims this name: keep what is there
	}
	if act == ActionDelete && refused {
		act = ActionNone // the origin's new output was refused: keep its last good objects
	}
	return act, false
}

// unprovenAnnotation marks the isolation-only stand-in of an unproven
// MCNP's generated object.
const unprovenAnnotation = enforce.AnnotationUnproven

// isolateUnproven is what an unproven MCNP's generated object may still
// become: only less than both the proven object and the update allow (fail
// closed: a known policy that is not proven yet must not leave the pods it
// selects open, and an update that takes allows away must not wait for its
// proof). Absent: the stand-in (enforce.IsolationOnly), which isolates
// the pods the update selects and allows them nothing. An update that
// allows no more than the proven object is applied; one that allows more
// keeps the proven object; one that is neither, on the same pods, gets
// the rules both allow (intersection); one that selects other pods keeps
// the proven object (a stand-in would drop the isolation of the pods only
// it selects). Under the empty-view gate nothing proven is replaced (the
// update may be narrower only because the view is partial). The proof
// replaces whatever was done here; an honest stream dropping the entry
// deletes or restores it like any generated object.
func (a *Applier) isolateUnproven(ctx context.Context, key, origin string, act Action, desired, live *networkingv1.NetworkPolicy, broken, hold bool) error {
	if act != ActionApply || desired == nil || broken {
		return nil
	}
	target, what := unprovenTarget(desired, live, hold)
	if target == nil || (live != nil && live.Annotations[ContentHashAnnotation] == target.Annotations[ContentHashAnnotation]) {
		return nil
	}
	a.log.Info("MCNP entry not proven yet; enforcing "+what+" until it is", "key", key, "origin", origin)
	return a.apply(ctx, target)
}

// unprovenTarget decides isolateUnproven: the object to apply (nil: leave
// live as it is) and, for the log, what it is. An object annotated
// unprovenAnnotation was put there by this function and allows no more
// than the proven version did.
func unprovenTarget(desired, live *networkingv1.NetworkPolicy, hold bool) (*networkingv1.NetworkPolicy, string) {
	proven := live != nil && live.Annotations[unprovenAnnotation] == ""
	switch {
	case live == nil:
		return enforce.IsolationOnly(desired), "its generated NetworkPolicy isolation-only (deny)"
	case proven && (hold || live.Annotations[ContentHashAnnotation] == desired.Annotations[ContentHashAnnotation] || Widens(desired, live)):
		return nil, ""
	case !sameSelection(desired, live):
		if proven {
			return nil, ""
		}
		return enforce.IsolationOnly(desired), "its generated NetworkPolicy isolation-only (deny)"
	case proven && Widens(live, desired):
		return desired, "the update, which only takes allows away"
	}
	return intersection(desired, live), "what both the proven and the unproven version allow"
}

// intersection returns desired with only the rules live also has: for each
// pair of rules with the same ports, the peers both name (a rule without
// peers names every peer). It allows no more than either (peers are
// compared as written, so overlapping CIDRs count as different: less), and
// carries unprovenAnnotation ("intersection", or "isolation-only" when no
// rule is left).
func intersection(desired, live *networkingv1.NetworkPolicy) *networkingv1.NetworkPolicy {
	d, l := NormalizedSpec(&desired.Spec), NormalizedSpec(&live.Spec)
	out := enforce.IsolationOnly(desired)
	for _, dr := range d.Ingress {
		for _, lr := range l.Ingress {
			if peers, ok := commonPeers(dr.Ports, lr.Ports, dr.From, lr.From); ok {
				out.Spec.Ingress = append(out.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{Ports: dr.Ports, From: peers})
			}
		}
	}
	for _, dr := range d.Egress {
		for _, lr := range l.Egress {
			if peers, ok := commonPeers(dr.Ports, lr.Ports, dr.To, lr.To); ok {
				out.Spec.Egress = append(out.Spec.Egress, networkingv1.NetworkPolicyEgressRule{Ports: dr.Ports, To: peers})
			}
		}
	}
	if len(out.Spec.Ingress)+len(out.Spec.Egress) > 0 {
		out.Annotations[unprovenAnnotation] = "intersection"
		out.Annotations[ContentHashAnnotation] = enforce.ContentHash(out)
	}
	return out
}

// commonPeers returns the peers two rules both allow, if they have the same
// ports and share any (an empty result would read as every peer, so none
// shared is no rule).
func commonPeers(dPorts, lPorts []networkingv1.NetworkPolicyPort, dPeers, lPeers []networkingv1.NetworkPolicyPeer) ([]networkingv1.NetworkPolicyPeer, bool) {
	if !apiequality.Semantic.DeepEqual(dPorts, lPorts) {
		return nil, false
	}
	switch {
	case len(dPeers) == 0:
		return lPeers, true
	case len(lPeers) == 0:
		return dPeers, true
	}
	var common []networkingv1.NetworkPolicyPeer
	for _, dp := range dPeers {
		if slices.ContainsFunc(lPeers, func(lp networkingv1.NetworkPolicyPeer) bool { return apiequality.Semantic.DeepEqual(dp, lp) }) {
			common = append(common, dp)
		}
	}
	return common, len(common) > 0
}

// sameSelection reports whether a and b isolate the same pods in the same
// directions.
func sameSelection(a, b *networkingv1.NetworkPolicy) bool {
	return sameNormalizedSelection(NormalizedSpec(&a.Spec), NormalizedSpec(&b.Spec))
}

// sameNormalizedSelection is sameSelection on specs NormalizedSpec made.
func sameNormalizedSelection(x, y *networkingv1.NetworkPolicySpec) bool {
	return apiequality.Semantic.DeepEqual(x.PodSelector, y.PodSelector) && apiequality.Semantic.DeepEqual(x.PolicyTypes, y.PolicyTypes)
}

// track records whether key is held or foreign now (and the gauges), and
// returns whether it was before.
func (a *Applier) track(key string, act Action) (wasHeld, wasForeign bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, wasHeld = a.held[key]
	if act == ActionHold {
		a.held[key] = struct{}{}
	} else {
		delete(a.held, key)
	}
	a.metrics.Held.Set(float64(len(a.held)))
	_, wasForeign = a.foreign[key]
	if act == ActionForeign {
		a.foreign[key] = struct{}{}
	} else {
		delete(a.foreign, key)
	}
	a.metrics.Foreign.Set(float64(len(a.foreign)))
	return wasHeld, wasForeign
}

// act carries out the decision for key.
func (a *Applier) act(ctx context.Context, key, origin string, act Action, desired, live *networkingv1.NetworkPolicy, wasHeld, wasForeign bool) error {
	switch act {
	case ActionApply:
		if live != nil && live.Annotations[ContentHashAnnotation] == desired.Annotations[ContentHashAnnotation] {
			// same content hash, yet drifted: a hand edit (a content
			// update, or a stand-in's replacement, is no repair)
			a.metrics.Repairs.Inc()
			a.log.Info("generated NetworkPolicy drifted (hand edit or removed label); restoring it", "key", key, "origin", origin)
		}
		return a.apply(ctx, desired)
	case ActionDelete:
		return a.delete(ctx, live)
	case ActionConflict:
		a.metrics.Conflicts.Inc()
		a.log.Warn("user-authored NetworkPolicy holds a generated name; leaving it alone", "key", key)
		return &blockedError{fmt.Sprintf("NetworkPolicy %s exists and was not written by coastguard; not overwriting it", key)}
	case ActionForeign:
		if !wasForeign {
			a.reportForeign(key, live)
		}
		if desired != nil {
			return &blockedError{fmt.Sprintf("NetworkPolicy %s is held by an object coastguard did not write (foreign); not overwriting it", key)}
		}
	case ActionHold:
		if !wasHeld {
			a.log.Info("empty-view gate closed: holding back delete or content change", "key", key, "origin", origin)
		}
	}
	return nil
}

// reportForeign logs, and records an Event on, a NetworkPolicy that carries
// coastguard's label but that coastguard never wrote.
func (a *Applier) reportForeign(key string, live *networkingv1.NetworkPolicy) {
	a.log.Warn("NetworkPolicy carries coastguard's managed-by label but coastguard never wrote it; leaving it alone", "key", key)
	if a.recorder != nil {
		ref := live.DeepCopy() // the recorder's scheme need not know NetworkPolicy
		ref.TypeMeta = metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"}
		a.recorder.Eventf(ref, corev1.EventTypeWarning, "ForeignNetworkPolicy",
			"NetworkPolicy carries %s=%s but was not written by coastguard (field manager %q); coastguard leaves it alone", ManagedByLabel, ManagedByValue, FieldManager)
	}
}

func (a *Applier) apply(ctx context.Context, np *networkingv1.NetworkPolicy) error {
	body, err := ApplyBody(np)
	if err != nil {
		return err
	}
	start := time.Now()
	_, err = a.client.NetworkingV1().NetworkPolicies(np.Namespace).Patch(ctx, np.Name, types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: FieldManager, Force: ptr.To(true)})
	a.metrics.Duration.WithLabelValues("apply").Observe(time.Since(start).Seconds())
	if err != nil {
		a.metrics.Errors.WithLabelValues("apply").Inc()
		return fmt.Errorf("apply NetworkPolicy %s/%s: %w", np.Namespace, np.Name, err)
	}
	a.metrics.Applies.Inc()
	a.log.Debug("applied NetworkPolicy", "namespace", np.Namespace, "name", np.Name, "hash", np.Annotations[ContentHashAnnotation])
	return nil
}

func (a *Applier) delete(ctx context.Context, live *networkingv1.NetworkPolicy) error {
	start := time.Now()
	// The UID precondition makes sure a same-named object created after
	// our cache saw this one (possibly user-authored) is never deleted.
	err := a.client.NetworkingV1().NetworkPolicies(live.Namespace).Delete(ctx, live.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(live.UID)}})
	a.metrics.Duration.WithLabelValues("delete").Observe(time.Since(start).Seconds())
	switch {
	case apierrors.IsNotFound(err):
		return nil // already gone
	case apierrors.IsConflict(err):
		return nil // a different object now holds the name; its own event re-queues the key
	case err != nil:
		a.metrics.Errors.WithLabelValues("delete").Inc()
		return fmt.Errorf("delete NetworkPolicy %s/%s: %w", live.Namespace, live.Name, err)
	}
	a.metrics.Deletes.Inc()
	a.log.Debug("deleted generated NetworkPolicy", "namespace", live.Namespace, "name", live.Name)
	return nil
}

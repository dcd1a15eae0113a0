package enforce

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"strconv"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels and annotations carried by every generated NetworkPolicy.
const (
	LabelManagedBy       = "app.kubernetes.io/managed-by"
	ManagedByValue       = "coastguard"
	LabelOriginCluster   = "coastguard.submariner.io/origin-cluster"
	LabelOriginNamespace = "coastguard.submariner.io/origin-namespace"
	LabelOriginName      = "coastguard.submariner.io/origin-name"
	// AnnotationOrigin holds "<cluster>/<namespace>/<name>" in full (label
	// values are limited to 63 characters and may be shortened).
	AnnotationOrigin = "coastguard.submariner.io/origin"
	// AnnotationPart holds "<i>/<n>" when a policy is split into n parts.
	AnnotationPart = "coastguard.submariner.io/part"
	// AnnotationContentHash is a SHA-256 over the generated labels and spec;
	// the applier compares it to skip no-op updates.
	AnnotationContentHash = "coastguard.submariner.io/content-hash"
	// AnnotationUnproven marks the isolation-only stand-in for a generated
	// policy whose MCNP is not proven yet (IsolationOnly).
	AnnotationUnproven = "coastguard.submariner.io/unproven"
)

const (
	maxNameLen  = 253 // DNS-1123 subdomain
	maxLabelLen = 63
	namePrefix  = "mcnp-"
)

func shortHash(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:10]
}

// trimAlnum trims trailing characters that may not end a DNS name.
func trimAlnum(s string) string {
	return strings.TrimRight(s, ".-")
}

// GeneratedName is the name of part i (0-based) of the NetworkPolicies
// generated from MCNP origin/name: "mcnp-<origin>.<name>[-p<k>]-<hash>",
// k = i+1 being the 1-based part number of parts after the first, and hash
// 16 hex digits of a SHA-256 over (origin, name, part). The readable prefix is
// shortened so the name fits 253 characters; the hash suffix alone identifies
// the (origin, name, part) triple, so two different MCNPs (or parts) never
// share a name whatever dots or "-p2-..." suffixes their names or cluster IDs
// contain (a collision would need a 64-bit SHA-256 prefix collision, and the
// applier still refuses it per policy, see kube.Applier). The origin is
// readable in the origin labels and the full AnnotationOrigin.
func GeneratedName(origin, name string, part int) string {
	h := nameHash(origin, name, part)
	readable := namePrefix + origin + "." + name
	if part > 0 {
		readable += "-p" + strconv.Itoa(part+1)
	}
	if max := maxNameLen - len(h) - 1; len(readable) > max {
		readable = trimAlnum(readable[:max])
	}
	return readable + "-" + h
}

// nameHash is the identity suffix of a generated name.
func nameHash(origin, name string, part int) string {
	h := sha256.New()
	for _, p := range []string{"coastguard-name/v2", origin, name, strconv.Itoa(part)} {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// labelValue returns v when it is a valid-length label value, else a
// shortened value with a hash suffix.
func labelValue(v string) string {
	if len(v) <= maxLabelLen {
		return v
	}
	h := shortHash(v)
	return trimAlnum(v[:maxLabelLen-len(h)-1]) + "-" + h
}

func buildNetworkPolicy(cp *compiledPolicy, i, n int, pt *part) networkingv1.NetworkPolicy {
	np := networkingv1.NetworkPolicy{
		TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      GeneratedName(cp.ref.Origin, cp.ref.Name, i),
			Namespace: cp.ref.Namespace,
			Labels: map[string]string{
				LabelManagedBy:       ManagedByValue,
				LabelOriginCluster:   labelValue(cp.ref.Origin),
				LabelOriginNamespace: labelValue(cp.ref.Namespace),
				LabelOriginName:      labelValue(cp.ref.Name),
			},
			Annotations: map[string]string{
				AnnotationOrigin: cp.ref.String(),
			},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: *cp.policy.Spec.PodSelector.DeepCopy(),
			Ingress:     pt.ingress,
			Egress:      pt.egress,
			PolicyTypes: append([]networkingv1.PolicyType(nil), cp.types...),
		},
	}
	if n > 1 {
		np.Annotations[AnnotationPart] = strconv.Itoa(i+1) + "/" + strconv.Itoa(n)
	}
	np.Annotations[AnnotationContentHash] = ContentHash(&np)
	return np
}

// IsolationOnly returns the stand-in for np while the MCNP np comes from is
// not proven by its origin's signed state mark (docs/SECURITY.md): the same
// name, labels, pod selector and policy types, no rule, and
// AnnotationUnproven. It isolates the pods np selects for the directions np
// isolates and allows them nothing, so it can only take traffic away (a
// NetworkPolicy adds allows to the pods it isolates): an MCNP that is known
// but not yet proven is enforced as deny, never left open.
func IsolationOnly(np *networkingv1.NetworkPolicy) *networkingv1.NetworkPolicy {
	out := &networkingv1.NetworkPolicy{
		TypeMeta: np.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name:        np.Name,
			Namespace:   np.Namespace,
			Labels:      maps.Clone(np.Labels),
			Annotations: maps.Clone(np.Annotations),
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: *np.Spec.PodSelector.DeepCopy(),
			PolicyTypes: append([]networkingv1.PolicyType(nil), np.Spec.PolicyTypes...),
		},
	}
	if len(out.Spec.PolicyTypes) == 0 {
		// the apiserver's default, spelled out: without rules it would
		// read as ingress only
		out.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		if len(np.Spec.Egress) > 0 {
			out.Spec.PolicyTypes = append(out.Spec.PolicyTypes, networkingv1.PolicyTypeEgress)
		}
	}
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[AnnotationUnproven] = "isolation-only"
	out.Annotations[AnnotationContentHash] = ContentHash(out)
	return out
}

// ContentHash hashes what coastguard owns in a NetworkPolicy: its name,
// namespace, labels, the annotations other than the hash itself, and spec.
func ContentHash(np *networkingv1.NetworkPolicy) string {
	ann := map[string]string{}
	for k, v := range np.Annotations {
		if k != AnnotationContentHash {
			ann[k] = v
		}
	}
	b, _ := json.Marshal(struct {
		Name        string                         `json:"n"`
		Namespace   string                         `json:"ns"`
		Labels      map[string]string              `json:"l"`
		Annotations map[string]string              `json:"a"`
		Spec        networkingv1.NetworkPolicySpec `json:"s"`
	}{np.Name, np.Namespace, np.Labels, ann, np.Spec})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

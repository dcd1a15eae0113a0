package enforce

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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
// generated from MCNP origin/name. Part 0 is "mcnp-<origin>.<name>"; since
// cluster IDs contain no dots this is unique per (origin, name). Further
// parts append ".p<k>-<hash>", k = i+1 being the 1-based part number. Names
// longer than 253 characters are shortened and suffixed with a hash of the
// full identity.
func GeneratedName(origin, name string, part int) string {
	n := namePrefix + origin + "." + name
	if part > 0 {
		n += ".p" + strconv.Itoa(part+1) + "-" + shortHash(origin, name, strconv.Itoa(part))
	}
	if len(n) <= maxNameLen {
		return n
	}
	h := shortHash(origin, name, strconv.Itoa(part))
	return trimAlnum(n[:maxNameLen-len(h)-1]) + "-" + h
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

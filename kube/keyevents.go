package kube

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/record"

	v1 "github.com/coastguard-mcnp/coastguard/api/v1"
)

// EventSigningKeyMismatch is the Warning Event recorded on the
// CoastguardCluster of a cluster when a peer presents, for that cluster's
// ID, another signing key than the trusted one (docs/SECURITY.md).
const EventSigningKeyMismatch = "SigningKeyMismatch"

// RecordKeyMismatch records EventSigningKeyMismatch on the CoastguardCluster
// named cluster, naming both key fingerprints. When the object cannot be
// read (not created yet, no leader) the Event still refers to it by name,
// so `kubectl describe coastguardcluster <id>` shows it once it exists.
func RecordKeyMismatch(ctx context.Context, dyn dynamic.Interface, rec record.EventRecorder, cluster, trustedFP, presentedFP string) {
	obj := &v1.CoastguardCluster{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1.SchemeGroupVersion.String(), Kind: v1.KindCoastguardCluster},
		ObjectMeta: metav1.ObjectMeta{Name: cluster},
	}
	if dyn != nil {
		if u, err := dyn.Resource(v1.CoastguardClusterGVR).Get(ctx, cluster, metav1.GetOptions{}); err == nil {
			var cc v1.CoastguardCluster
			if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &cc) == nil {
				cc.TypeMeta = obj.TypeMeta
				obj = &cc
			}
		}
	}
	rec.Event(obj, corev1.EventTypeWarning, EventSigningKeyMismatch, fmt.Sprintf(
		"refusing data for cluster %s signed with key %s: the trusted key of %s is %s (a rogue or mis-keyed cluster claims this ID; see docs/SECURITY.md)",
		cluster, presentedFP, cluster, trustedFP))
}

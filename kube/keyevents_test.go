package kube

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/record"

	v1 "github.com/coastguard-mcnp/coastguard/api/v1"
)

func TestRecordKeyMismatch(t *testing.T) {
	scheme := runtime.NewScheme()
	require.NoError(t, v1.AddToScheme(scheme))
	cc := &v1.CoastguardCluster{TypeMeta: metav1.TypeMeta{APIVersion: v1.SchemeGroupVersion.String(), Kind: v1.KindCoastguardCluster},
		ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "uid-b"}}
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(scheme,
		map[schema.GroupVersionResource]string{v1.CoastguardClusterGVR: "CoastguardClusterList"}, cc)
	rec := record.NewFakeRecorder(4)
	rec.IncludeObject = true
	RecordKeyMismatch(context.Background(), dyn, rec, "b", "SHA256:trusted", "SHA256:rogue")
	ev := <-rec.Events
	require.Contains(t, ev, "Warning SigningKeyMismatch")
	require.Contains(t, ev, "SHA256:trusted")
	require.Contains(t, ev, "SHA256:rogue")
	require.Contains(t, ev, "kind=CoastguardCluster")
	require.Equal(t, "get", dyn.Actions()[0].GetVerb(), "the Event refers to the object read back (its UID)")

	// no object yet: still recorded, by name
	RecordKeyMismatch(context.Background(), dyn, rec, "c", "SHA256:t", "SHA256:r")
	ev = <-rec.Events
	require.Contains(t, ev, "SigningKeyMismatch")
	require.Contains(t, ev, "for cluster c ")
}

package kube

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestEnsureSigningKeyCreatesOnceAndReads(t *testing.T) {
	c := fake.NewSimpleClientset()
	n := 0
	gen := func() ([]byte, error) { n++; return []byte{byte('a' + n)}, nil }
	b, created, err := EnsureSigningKey(context.Background(), c, "ns", gen, nil)
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, []byte("b"), b)
	b2, created, err := EnsureSigningKey(context.Background(), c, "ns", gen, nil)
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, b, b2, "the stored key, not a new one")
	require.Equal(t, 1, n)
}

// Two pods racing: the loser of Create reads the winner's key.
func TestEnsureSigningKeyRaceUsesWinnersKey(t *testing.T) {
	c := fake.NewSimpleClientset()
	var once sync.Once
	c.PrependReactor("create", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		once.Do(func() {
			// The winner's Secret lands between our Get and our Create.
			_ = c.Tracker().Add(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: SigningKeySecret, Namespace: "ns"},
				Data: map[string][]byte{SigningKeyField: []byte("winner")}})
		})
		return false, nil, nil
	})
	b, created, err := EnsureSigningKey(context.Background(), c, "ns", func() ([]byte, error) { return []byte("loser"), nil }, nil)
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, []byte("winner"), b)
}

func TestEnsureSigningKeyFailsClosed(t *testing.T) {
	c := fake.NewSimpleClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: SigningKeySecret, Namespace: "ns"}})
	_, _, err := EnsureSigningKey(context.Background(), c, "ns", func() ([]byte, error) { return []byte("x"), nil }, nil)
	require.ErrorContains(t, err, "has no")

	c = fake.NewSimpleClientset()
	c.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("forbidden")
	})
	_, _, err = EnsureSigningKey(context.Background(), c, "ns", func() ([]byte, error) { return []byte("x"), nil }, nil)
	require.ErrorContains(t, err, "forbidden")
}

package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The Secret holding this cluster's Ed25519 signing key (docs/SECURITY.md).
const (
	SigningKeySecret = "coastguard-signing-key"
	SigningKeyField  = "signing.key"
)

// EnsureSigningKey returns the content of the signing key Secret in ns,
// creating it with generate() when it does not exist. Creation is atomic
// in the apiserver: when several pods start at once, exactly one Create
// succeeds and every other pod gets AlreadyExists and reads the winner's
// key, so all pods of the cluster end up with the same key and none runs
// unsigned. created reports whether this call created the Secret.
func EnsureSigningKey(ctx context.Context, c kubernetes.Interface, ns string, generate func() ([]byte, error), log *slog.Logger) (data []byte, created bool, err error) {
	if log == nil {
		log = slog.Default()
	}
	secrets := c.CoreV1().Secrets(ns)
	get := func() ([]byte, error) {
		s, err := secrets.Get(ctx, SigningKeySecret, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		b := s.Data[SigningKeyField]
		if len(b) == 0 {
			return nil, fmt.Errorf("signing key Secret %s/%s has no %q key", ns, SigningKeySecret, SigningKeyField)
		}
		return b, nil
	}
	b, err := get()
	if err == nil {
		return b, false, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, false, fmt.Errorf("reading Secret %s/%s: %w", ns, SigningKeySecret, err)
	}
	fresh, err := generate()
	if err != nil {
		return nil, false, err
	}
	_, err = secrets.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: SigningKeySecret, Namespace: ns, Labels: map[string]string{
			LabelManagedByKey: "coastguard", "app.kubernetes.io/name": "coastguard"}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{SigningKeyField: fresh},
	}, metav1.CreateOptions{FieldManager: FieldManager})
	switch {
	case err == nil:
		log.Warn("created this cluster's signing key: Secret "+SigningKeySecret+" did not exist (back it up; other clusters pin its key on first use, docs/OPERATIONS.md)",
			"namespace", ns, "secret", SigningKeySecret)
		return fresh, true, nil
	case apierrors.IsAlreadyExists(err):
		// Another pod won the race: use its key, never ours.
		b, err := get()
		if err != nil {
			return nil, false, fmt.Errorf("reading Secret %s/%s after losing the create race: %w", ns, SigningKeySecret, err)
		}
		return b, false, nil
	}
	return nil, false, errors.Join(fmt.Errorf("creating Secret %s/%s", ns, SigningKeySecret), err)
}

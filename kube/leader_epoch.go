package kube

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// RecordEpoch fences the writer epoch this leader writes at: the next
// term's epoch hint is EpochHint(leaseTransitions) = leaseTransitions+1,
// and client-go adds one to leaseTransitions when another identity
// acquires the Lease, but not when the same identity (a daemon restarted
// on its persisted identity) acquires it again. A writer may run above its
// own hint (its replica had seen later versions of its origin, or the mesh
// retired its epoch), so the holder raises leaseTransitions to epoch
// before it writes at epoch: every later term, by another identity or by
// this one after a restart that lost its store, starts above it, never at
// an epoch two terms share (two terms at one epoch write different entries
// under the same versions, which no seal separates). It fails unless this
// elector still holds the Lease; the caller must not write at epoch then.
func (e *Elector) RecordEpoch(ctx context.Context, epoch uint32) error {
	want := int32(epoch)
	for try := 0; try < 5; try++ {
		l, err := e.cfg.Client.CoordinationV1().Leases(e.cfg.Namespace).Get(ctx, e.name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("recording writer epoch %d on the Lease: %w", epoch, err)
		}
		if holder := ptr.Deref(l.Spec.HolderIdentity, ""); holder != e.cfg.Identity {
			return fmt.Errorf("recording writer epoch %d on the Lease: held by %q, not by us", epoch, holder)
		}
		if ptr.Deref(l.Spec.LeaseTransitions, 0) >= want {
			return nil // a successor already starts above epoch
		}
		l.Spec.LeaseTransitions = ptr.To(want)
		_, err = e.cfg.Client.CoordinationV1().Leases(e.cfg.Namespace).Update(ctx, l, metav1.UpdateOptions{})
		if err == nil {
			e.log.Info("writer epoch recorded on the Lease", "epoch", epoch, "leaseTransitions", want)
			return nil
		}
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("recording writer epoch %d on the Lease: %w", epoch, err)
		}
	}
	return fmt.Errorf("recording writer epoch %d on the Lease: conflicting updates", epoch)
}

package daemon

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/coastguard-mcnp/coastguard/enforce"
)

// LoadConsent reads and validates a consent file (enforce.ParseConsent).
func LoadConsent(path string) (*enforce.Consent, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("consent file: %w", err)
	}
	return enforce.ParseConsent(path, b)
}

// EventNotAdmitted is the Event on a Namespace of this cluster when an MCNP
// of another cluster is not admitted in it.
const EventNotAdmitted = "MCNPNotAdmitted"

// consentEventLoop records an Event (on the Namespace, in this cluster)
// and a log line for every MCNP of another cluster that this cluster's
// consent newly refuses. Only the leader records.
func (d *Daemon) consentEventLoop(ctx context.Context, rec record.EventRecorder) {
	if d.opts.Consent == nil {
		return
	}
	seen := map[enforce.PolicyRef]bool{}
	every(ctx, SanityInterval, func(time.Time) {
		d.mu.Lock()
		refused := d.outputs.Refused()
		d.mu.Unlock()
		for ref := range seen {
			if _, ok := refused[ref]; !ok {
				delete(seen, ref)
			}
		}
		if !d.leader.Load() {
			return
		}
		for ref, why := range refused {
			if seen[ref] {
				continue
			}
			seen[ref] = true
			d.log.Warn("MCNP of another cluster not admitted here", "policy", ref.String(), "remote_cluster", ref.Origin, "why", why)
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ref.Namespace}}
			ns.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}
			rec.Eventf(ns, corev1.EventTypeWarning, EventNotAdmitted, "MCNP %s/%s of cluster %s is not enforced here: %s", ref.Namespace, ref.Name, ref.Origin, why)
		}
	})
}

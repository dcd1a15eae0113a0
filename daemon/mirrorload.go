package daemon

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
)

// load is Load's bulk path. A daemon starting with a million remote pods
// in its replica must have its enforce view quickly (docs/PERFORMANCE.md,
// cold start), so live pods, nearly all of the entries, skip what apply
// does per change: the origin is checked once per origin, entries are
// visited unordered (the view does not depend on order), and one decode
// target is reused (the inventory copies what it keeps). Everything else,
// and every pod the fast path cannot take (a bad origin or name, a value
// that does not decode), goes through apply, so errors are exactly those
// of apply.
func (m *Mirror) load(st *crdt.State) []error {
	var errs []error
	slow := func(e crdt.Entry) {
		if _, err := m.apply(crdt.Change{Key: e.Key, New: &e}); err != nil {
			errs = append(errs, err)
		}
	}
	var (
		v      crdt.PodValue
		labels = map[string]string{}
		ips    []string
		p      enforce.Pod
	)
	for _, origin := range st.Origins() {
		fast := len(validation.IsDNS1123Label(origin)) == 0
		for _, k := range []crdt.Kind{crdt.KindCluster, crdt.KindNamespace, crdt.KindPod, crdt.KindPolicy, crdt.KindReport} {
			if k != crdt.KindPod || !fast {
				st.Range(origin, k, func(e crdt.Entry) bool { slow(e); return true })
				continue
			}
			st.Each(origin, k, func(e crdt.Entry) bool {
				if e.Deleted {
					slow(e)
					return true
				}
				ns, name, ok := splitNS(e.Name)
				if !ok {
					slow(e)
					return true
				}
				clear(labels)
				v = crdt.PodValue{Labels: labels, IPs: ips[:0]}
				if err := crdt.DecodeValue(e.Value, &v); err != nil {
					slow(e)
					return true
				}
				if v.Labels != nil {
					labels = v.Labels
				}
				ips = v.IPs
				m.counts[origin]++
				m.ensureCluster(origin)
				p = enforce.Pod{Namespace: ns, Name: name, Labels: v.Labels, IPs: v.IPs,
					Phase: corev1.PodPhase(v.Phase), HostNetwork: v.HostNetwork, EgressIPs: v.EgressIPs, Ports: p.Ports[:0]}
				for _, port := range v.Ports {
					p.Ports = append(p.Ports, enforce.Port{Name: port.Name, Port: port.Port, Protocol: corev1.Protocol(port.Protocol)})
				}
				m.inv.SetPod(origin, p)
				return true
			})
		}
	}
	return errs
}

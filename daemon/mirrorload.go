package daemon

import (
	"runtime"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/enforce"
)

// load is Load's bulk path. A daemon starting with a million remote pods
// in its replica must have its enforce view quickly (docs/PERFORMANCE.md,
// cold start), so live pods, nearly all of the entries, skip what apply
// does per change: the origin is checked once per origin, entries are
// visited unordered (the view does not depend on order), their values are
// decoded by crdt.PodDecoder on a second goroutine while this one fills
// the inventory, and decode targets are reused (the inventory copies what
// it keeps).
// Everything else, and every pod the fast path cannot take (a bad origin
// or name, a value that does not decode), goes through apply, so errors
// are exactly those of apply. The result does not depend on the
// scheduling: the inventory is only touched here, in one goroutine.
func (m *Mirror) load(st *crdt.State) []error {
	var errs []error
	slow := func(e *crdt.Entry) {
		if _, err := m.apply(crdt.Change{Key: e.Key, New: e}); err != nil {
			errs = append(errs, err)
		}
	}
	var pods []crdt.Entry
	for _, origin := range st.Origins() {
		fast := len(validation.IsDNS1123Label(origin)) == 0
		for _, spec := range crdt.Kinds() {
			k := spec.Kind
			if k != crdt.KindPod || !fast {
				st.Range(origin, k, func(e crdt.Entry) bool { slow(&e); return true })
				continue
			}
			pods = pods[:0]
			st.Each(origin, k, func(e crdt.Entry) bool { pods = append(pods, e); return true })
			m.loadPods(origin, pods, slow)
		}
	}
	return errs
}

// decodedPod is one live pod entry, decoded for loadPods.
type decodedPod struct {
	e        *crdt.Entry
	ns, name string
	v        crdt.PodValue // reused decode target
	ok       bool
}

func (d *decodedPod) decode(pd *crdt.PodDecoder, e *crdt.Entry) {
	d.e, d.ok = e, false
	if e.Deleted {
		return
	}
	var ok bool
	if d.ns, d.name, ok = splitNS(e.Name); !ok {
		return
	}
	d.ok = pd.Decode(e.Value, &d.v) == nil
}

const loadBatch = 512

// loadPods mirrors the pod entries of one valid origin.
func (m *Mirror) loadPods(origin string, entries []crdt.Entry, slow func(*crdt.Entry)) {
	var p enforce.Pod
	apply := func(batch []decodedPod) {
		for i := range batch {
			d := &batch[i]
			if !d.ok {
				slow(d.e)
				continue
			}
			m.counts[origin]++
			m.ensureCluster(origin)
			p = enforce.Pod{Namespace: d.ns, Name: d.name, Labels: d.v.Labels, IPs: d.v.IPs,
				Phase: corev1.PodPhase(d.v.Phase), HostNetwork: d.v.HostNetwork, EgressIPs: d.v.EgressIPs, Ports: p.Ports[:0]}
			for _, port := range d.v.Ports {
				p.Ports = append(p.Ports, enforce.Port{Name: port.Name, Port: port.Port, Protocol: corev1.Protocol(port.Protocol)})
			}
			m.inv.SetPod(origin, p)
		}
	}
	decode := func(pd *crdt.PodDecoder, batch []decodedPod, from int) []decodedPod {
		batch = batch[:min(loadBatch, len(entries)-from)]
		for i := range batch {
			batch[i].decode(pd, &entries[from+i])
		}
		return batch
	}
	if runtime.GOMAXPROCS(0) < 2 || len(entries) <= loadBatch {
		var pd crdt.PodDecoder
		batch := make([]decodedPod, loadBatch)
		for from := 0; from < len(entries); from += loadBatch {
			apply(decode(&pd, batch, from))
		}
		return
	}
	// Three batches circulate: one being decoded, one being applied, one
	// ready. The decoding goroutine only reads entries (the state is not
	// changed while Load runs) and writes the batch it holds.
	const buffers = 3
	free, ready := make(chan []decodedPod, buffers), make(chan []decodedPod, buffers)
	for range buffers {
		free <- make([]decodedPod, loadBatch)
	}
	go func() {
		defer close(ready)
		var pd crdt.PodDecoder
		for from := 0; from < len(entries); from += loadBatch {
			ready <- decode(&pd, <-free, from)
		}
	}()
	for batch := range ready {
		apply(batch)
		free <- batch[:cap(batch)]
	}
}

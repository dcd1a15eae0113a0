package daemon

import (
	"cmp"
	"runtime"
	"slices"

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

// LoadEntries builds the mirror from the entries of a state being
// restored, as store.Options.OnLoad hands them over: the daemon builds its
// view on one core while crdt.Restore runs on the other
// (docs/PERFORMANCE.md, cold start). The result, errors included, is that
// of Load on the state the entries restore to; the mirror must be empty
// (see Reset). Entries are taken in runs of one origin and kind, in the
// order Load visits them (origins sorted, kinds in registry order), so the
// input's order does not matter; a sorted snapshot (the store's) makes one
// run per origin and kind. Entries are only read, never kept.
func (m *Mirror) LoadEntries(entries []crdt.Entry) []error {
	var errs []error
	slow := func(e *crdt.Entry) {
		if _, err := m.apply(crdt.Change{Key: e.Key, New: e}); err != nil {
			errs = append(errs, err)
		}
	}
	type run struct {
		origin string
		kind   int // position in crdt.Kinds(); unknown kinds last
		lo, hi int
	}
	order := map[crdt.Kind]int{}
	for i, spec := range crdt.Kinds() {
		order[spec.Kind] = i
	}
	kindOrder := func(k crdt.Kind) int {
		if i, ok := order[k]; ok {
			return i
		}
		return len(order) + int(k)
	}
	var runs []run
	for lo := 0; lo < len(entries); {
		hi := lo + 1
		for hi < len(entries) && entries[hi].Origin == entries[lo].Origin && entries[hi].Kind == entries[lo].Kind {
			hi++
		}
		runs = append(runs, run{origin: entries[lo].Origin, kind: kindOrder(entries[lo].Kind), lo: lo, hi: hi})
		lo = hi
	}
	slices.SortStableFunc(runs, func(a, b run) int {
		return cmp.Or(cmp.Compare(a.origin, b.origin), cmp.Compare(a.kind, b.kind))
	})
	fast := false
	for i, r := range runs {
		if i == 0 || r.origin != runs[i-1].origin {
			fast = len(validation.IsDNS1123Label(r.origin)) == 0
		}
		if fast && entries[r.lo].Kind == crdt.KindPod {
			m.loadPods(r.origin, entries[r.lo:r.hi], slow)
			continue
		}
		for i := r.lo; i < r.hi; i++ {
			slow(&entries[i])
		}
	}
	return errs
}

// Reset empties the mirror of every entry it holds (clusters, pods,
// namespaces, policies, reports), keeping its configuration (networks,
// Globalnet policy): for a load that starts over (store.Options.OnLoad
// called again after a corrupt file was moved aside).
func (m *Mirror) Reset() {
	for _, c := range m.inv.Clusters() {
		m.inv.RemoveCluster(c)
	}
	for origin := range m.clusters {
		m.inv.RemoveCluster(origin)
	}
	clear(m.clusters)
	clear(m.counts)
	clear(m.reports)
	clear(m.validOrigin)
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
				Phase: corev1.PodPhase(d.v.Phase), HostNetwork: d.v.HostNetwork, EgressIPs: d.v.EgressIPs, NotReady: d.v.NotReady, Ports: p.Ports[:0]}
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

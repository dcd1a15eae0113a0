package model

import (
	"cmp"
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
// decoded by crdt.PodDecoder in batches, which the mirror's Pipeline may
// decode on a second goroutine while this one fills the inventory, and
// decode targets are reused (the inventory copies what it keeps).
// Everything else, and every pod the fast path cannot take (a bad origin
// or name, a value that does not decode), goes through apply, so errors
// are exactly those of apply. The result does not depend on the
// scheduling: the inventory is only touched by the caller's goroutine.
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
	var pd crdt.PodDecoder
	var bufs [PipelineBuffers][]decodedPod
	decode := func(i, buf int) {
		if bufs[buf] == nil {
			bufs[buf] = make([]decodedPod, loadBatch)
		}
		from := i * loadBatch
		b := bufs[buf][:min(loadBatch, len(entries)-from)]
		for j := range b {
			b[j].decode(&pd, &entries[from+j])
		}
		bufs[buf] = b
	}
	n := (len(entries) + loadBatch - 1) / loadBatch
	run := m.pipeline
	if run == nil || n <= 1 {
		run = Sequential
	}
	run(n, decode, func(buf int) { apply(bufs[buf]) })
}

// PipelineBuffers is the number of batch buffers a Pipeline may use.
const PipelineBuffers = 3

// A Pipeline runs n batches through decode and apply: decode(i, buf) fills
// buffer buf (0 <= buf < PipelineBuffers) with batch i, and apply(buf)
// folds it into the view. Calls of apply are made in batch order, by the
// caller's goroutine, after the decode of their batch returned; calls of
// decode are never concurrent with each other, nor with an apply of the
// same buffer. Decoding only reads the entries, so a pipeline may overlap
// it with apply on another goroutine (the daemon's cold start does, see
// SetPipeline); the result does not depend on how it schedules them.
type Pipeline func(n int, decode func(i, buf int), apply func(buf int))

// Sequential is the Pipeline of one goroutine: decode then apply, batch
// after batch, in buffer 0.
func Sequential(n int, decode func(i, buf int), apply func(buf int)) {
	for i := range n {
		decode(i, 0)
		apply(0)
	}
}

// SetPipeline sets how Load and LoadEntries decode pod entries in batches
// (nil: Sequential). The model starts no goroutine itself.
func (m *Mirror) SetPipeline(p Pipeline) { m.pipeline = p }

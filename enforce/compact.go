package enforce

import (
	"hash/maphash"
	"iter"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
)

// The compact pod view. At cluster-set scale the inventory holds a million
// remote pods, so a pod costs a small fixed struct plus pointers to shared,
// interned parts:
//
//   - labelSet: a pod's labels, sorted, immutable and interned by content,
//     so the pods of one Deployment (same labels, pod-template-hash
//     included) share one set. A set is a labelShape (the sorted keys,
//     shared by every set with the same keys) plus its values. A labelSet
//     implements labels.Labels, so selector matching still goes through
//     apimachinery's labels.Selector.
//   - podAux: a pod's container ports, addresses after the first and
//     Globalnet egress IPs, interned by content.
//   - addresses are parsed once into netip.Addr / netip.Prefix; the first
//     is stored inline in the 64-byte podEntry.
//   - the cluster and namespace names live once, in the namespaceState the
//     pod points to.
//
// Posting lists by label (namespaceState.index) are kept only for the
// label keys that some policy's pod selector can use (Inventory.indexKeys):
// no index is maintained that nothing reads.
//
// Interning is reference counted: a set, shape or aux no pod uses any more is
// forgotten, so churn (new pod-template-hashes on every rollout) does not
// grow the tables.

// labelShape is the sorted key list shared by every label set with the
// same keys (the pods of a workload, across its rollouts).
type labelShape struct {
	keys []string
	id   string // keys joined by NUL: the shape's intern key
	refs int32
}

// labelSet is an interned, immutable label set: a shape and the value of
// each of its keys.
type labelSet struct {
	shape *labelShape
	vals  []string
	refs  int32
	next  *labelSet // same-hash chain
}

// emptyLabels is shared by every pod without labels; it is never released.
var emptyLabels = &labelSet{shape: &labelShape{}}

var _ labels.Labels = (*labelSet)(nil)

func (s *labelSet) find(key string) int {
	keys := s.shape.keys
	if len(keys) <= 8 {
		for i := range keys {
			if keys[i] == key {
				return i
			}
		}
		return -1
	}
	i, ok := slices.BinarySearch(keys, key)
	if !ok {
		return -1
	}
	return i
}

// Has implements labels.Labels.
func (s *labelSet) Has(key string) bool { return s.find(key) >= 0 }

// Get implements labels.Labels.
func (s *labelSet) Get(key string) string {
	if i := s.find(key); i >= 0 {
		return s.vals[i]
	}
	return ""
}

// String renders the set like labels.Set (sorted key=value, comma
// separated); used only in log and error messages.
func (s *labelSet) String() string {
	var b strings.Builder
	for i, k := range s.shape.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(s.vals[i])
	}
	return b.String()
}

// interner holds the interned label sets, label shapes and pod auxiliary
// data (ports, extra addresses) of one inventory.
type interner struct {
	seed   maphash.Seed
	sets   map[uint64]*labelSet
	shapes map[string]*labelShape
	aux    map[string]*podAux
}

func newInterner() *interner {
	return &interner{
		seed:   maphash.MakeSeed(),
		sets:   map[uint64]*labelSet{},
		shapes: map[string]*labelShape{},
		aux:    map[string]*podAux{},
	}
}

func (in *interner) hash(keys []string, val func(i int) string) uint64 {
	var h maphash.Hash
	h.SetSeed(in.seed)
	for i, k := range keys {
		h.WriteString(k)
		h.WriteByte(0)
		h.WriteString(val(i))
		h.WriteByte(0)
	}
	return h.Sum64()
}

// labels returns the interned set equal to m, taking a reference.
func (in *interner) labels(m map[string]string) *labelSet {
	if len(m) == 0 {
		return emptyLabels
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	h := in.hash(keys, func(i int) string { return m[keys[i]] })
	for s := in.sets[h]; s != nil; s = s.next {
		if slices.Equal(s.shape.keys, keys) && s.valsEqual(m) {
			s.refs++
			return s
		}
	}
	s := &labelSet{shape: in.shape(keys), vals: make([]string, len(keys)), refs: 1, next: in.sets[h]}
	for i, k := range keys {
		s.vals[i] = m[k]
	}
	in.sets[h] = s
	return s
}

func (s *labelSet) valsEqual(m map[string]string) bool {
	for i, k := range s.shape.keys {
		if m[k] != s.vals[i] {
			return false
		}
	}
	return true
}

func (in *interner) shape(keys []string) *labelShape {
	id := strings.Join(keys, "\x00")
	if sh := in.shapes[id]; sh != nil {
		sh.refs++
		return sh
	}
	sh := &labelShape{keys: keys, id: id, refs: 1}
	in.shapes[id] = sh
	return sh
}

// releaseLabels drops a reference to s.
func (in *interner) releaseLabels(s *labelSet) {
	if s == nil || s == emptyLabels {
		return
	}
	if s.refs--; s.refs > 0 {
		return
	}
	h := in.hash(s.shape.keys, func(i int) string { return s.vals[i] })
	head := in.sets[h]
	switch {
	case head == s && s.next == nil:
		delete(in.sets, h)
	case head == s:
		in.sets[h] = s.next
	default:
		for p := head; p != nil; p = p.next {
			if p.next == s {
				p.next = s.next
				break
			}
		}
	}
	if sh := s.shape; sh != nil {
		if sh.refs--; sh.refs <= 0 {
			delete(in.shapes, sh.id)
		}
	}
}

// podAux is what few pods differ in, interned by content: container ports
// (shared by the pods of a workload), addresses after the first
// (dual-stack) and Globalnet egress IPs.
type podAux struct {
	ports  []Port
	more   []netip.Addr
	egress []netip.Prefix // parseAddrs(EgressIPs)
	key    string
	refs   int32
}

var noAux = &podAux{}

func auxKey(ports []Port, more []netip.Addr, egress []netip.Prefix) string {
	var b strings.Builder
	for _, p := range ports {
		b.WriteString(p.Name)
		b.WriteByte(0)
		b.WriteString(strconv.FormatInt(int64(p.Port), 10))
		b.WriteByte(0)
		b.WriteString(string(p.Protocol))
		b.WriteByte(0)
	}
	b.WriteByte(1)
	for _, a := range more {
		b.WriteString(a.String())
		b.WriteByte(0)
	}
	b.WriteByte(1)
	for _, p := range egress {
		b.WriteString(p.String())
		b.WriteByte(0)
	}
	return b.String()
}

func (in *interner) podAux(ports []Port, more []netip.Addr, egress []netip.Prefix) *podAux {
	if len(ports) == 0 && len(more) == 0 && len(egress) == 0 {
		return noAux
	}
	k := auxKey(ports, more, egress)
	if a := in.aux[k]; a != nil {
		a.refs++
		return a
	}
	a := &podAux{ports: slices.Clone(ports), more: slices.Clone(more), egress: slices.Clone(egress), key: k, refs: 1}
	in.aux[k] = a
	return a
}

func (in *interner) releaseAux(a *podAux) {
	if a == nil || a == noAux {
		return
	}
	if a.refs--; a.refs <= 0 {
		delete(in.aux, a.key)
	}
}

// podEntry is one pod as the translator needs it: 64 bytes plus shared,
// interned parts.
type podEntry struct {
	ns     *namespaceState // cluster and namespace names
	name   string
	labels *labelSet
	aux    *podAux
	// addr is the pod's first valid IP (unmapped, no zone), set only when
	// the pod is eligible (Pod.Eligible and a valid IP): ineligible pods
	// are never rendered, so their addresses are not kept.
	addr netip.Addr
}

// eligible reports whether the pod can be a peer.
func (e *podEntry) eligible() bool { return e.addr.IsValid() }

// addrs yields the pod's valid IPs in their original order (none for an
// ineligible pod).
func (e *podEntry) addrs() iter.Seq[netip.Addr] {
	return func(yield func(netip.Addr) bool) {
		if !e.addr.IsValid() || !yield(e.addr) {
			return
		}
		for _, a := range e.aux.more {
			if !yield(a) {
				return
			}
		}
	}
}

// ports are the pod's container ports.
func (e *podEntry) ports() []Port { return e.aux.ports }

// egress are the pod's Globalnet egress IPs.
func (e *podEntry) egress() []netip.Prefix { return e.aux.egress }

// key is cluster/namespace/name, for deterministic tie-breaks.
func (e *podEntry) key() string {
	return e.ns.cluster.id + "/" + e.ns.name + "/" + e.name
}

func comparePodKeys(a, b *podEntry) int {
	if a == b {
		return 0
	}
	return strings.Compare(a.key(), b.key())
}

// internedLabelSets is the number of distinct label sets; for tests.
func (inv *Inventory) internedLabelSets() (sets int) {
	for _, s := range inv.intern.sets {
		for ; s != nil; s = s.next {
			sets++
		}
	}
	return sets
}

package enforce

import (
	"encoding/binary"
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
//     is stored inline in the 48-byte podEntry (TestPodEntrySize).
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
	hash uint64 // of id; part of every set's hash (setHash)
	refs int32
}

// labelSet is an interned, immutable label set: a shape and the value of
// each of its keys. The values live in one string, each preceded by its
// length as a uvarint, so a set is two allocations (32 bytes each for the
// typical pod) however many labels it has.
type labelSet struct {
	shape *labelShape
	data  string
	refs  int32
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

// nextValue returns the value starting at offset off of data and the offset of
// the one after it.
func nextValue(data string, off int) (string, int) {
	n := uint64(data[off])
	off++
	if n >= 0x80 { // a value of 128 bytes or more (label values have <= 63)
		n &= 0x7f
		for shift := 7; ; shift += 7 {
			b := data[off]
			off++
			n |= uint64(b&0x7f) << shift
			if b < 0x80 {
				break
			}
		}
	}
	return data[off : off+int(n)], off + int(n)
}

// val returns the value of the i-th key of the shape.
func (s *labelSet) val(i int) string {
	off := 0
	var v string
	for ; i >= 0; i-- {
		v, off = nextValue(s.data, off)
	}
	return v
}

// vals yields the values in key order.
func (s *labelSet) vals() iter.Seq2[int, string] {
	return func(yield func(int, string) bool) {
		off := 0
		for i := range s.shape.keys {
			var v string
			v, off = nextValue(s.data, off)
			if !yield(i, v) {
				return
			}
		}
	}
}

// Has implements labels.Labels.
func (s *labelSet) Has(key string) bool { return s.find(key) >= 0 }

// Get implements labels.Labels.
func (s *labelSet) Get(key string) string {
	if i := s.find(key); i >= 0 {
		return s.val(i)
	}
	return ""
}

// String renders the set like labels.Set (sorted key=value, comma
// separated); used only in log and error messages.
func (s *labelSet) String() string {
	var b strings.Builder
	for i, v := range s.vals() {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(s.shape.keys[i])
		b.WriteByte('=')
		b.WriteString(v)
	}
	return b.String()
}

// interner holds the interned label sets, label shapes and pod auxiliary
// data (ports, extra addresses) of one inventory.
type interner struct {
	seed   maphash.Seed
	sets   ptrTable[labelSet]
	shapes map[string]*labelShape
	aux    map[string]*podAux
	// scratch buffers of labels and podAux (the inventory is not safe
	// for concurrent use)
	pairs [][2]string
	buf   []byte
	idBuf []byte
}

func newInterner() *interner {
	return &interner{
		seed:   maphash.MakeSeed(),
		shapes: map[string]*labelShape{},
		aux:    map[string]*podAux{},
	}
}

// setHash is a set's hash: its shape's (random, fixed) hash mixed with
// the hash of its values.
func (in *interner) setHash(s *labelSet) uint64 {
	return s.shape.hash ^ maphash.String(in.seed, s.data)
}

// labels returns the interned set equal to m, taking a reference.
func (in *interner) labels(m map[string]string) *labelSet {
	if len(m) == 0 {
		return emptyLabels
	}
	pairs := in.pairs[:0]
	for k, v := range m {
		pairs = append(pairs, [2]string{k, v})
	}
	slices.SortFunc(pairs, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	id, data := in.idBuf[:0], in.buf[:0]
	for i, p := range pairs {
		if i > 0 {
			id = append(id, 0)
		}
		id = append(id, p[0]...)
		data = binary.AppendUvarint(data, uint64(len(p[1])))
		data = append(data, p[1]...)
	}
	in.idBuf, in.buf, in.pairs = id, data, pairs
	defer clear(pairs) // do not pin decoded strings
	sh := in.shapes[string(id)]
	if sh != nil {
		h := sh.hash ^ maphash.String(in.seed, string(data))
		if s := in.sets.find(h, func(s *labelSet) bool { return s.shape == sh && s.data == string(data) }); s != nil {
			s.refs++
			return s
		}
		sh.refs++
	} else {
		keys := make([]string, len(pairs))
		for i, p := range pairs {
			keys[i] = p[0]
		}
		sh = &labelShape{keys: keys, id: string(id), refs: 1, hash: maphash.String(in.seed, string(id))}
		in.shapes[sh.id] = sh
	}
	s := &labelSet{shape: sh, data: string(data), refs: 1}
	in.sets.insert(in.setHash(s), s, in.setHash)
	return s
}

// releaseLabels drops a reference to s.
func (in *interner) releaseLabels(s *labelSet) {
	if s == nil || s == emptyLabels {
		return
	}
	if s.refs--; s.refs > 0 {
		return
	}
	in.sets.remove(in.setHash(s), s, in.setHash)
	if sh := s.shape; sh != nil {
		if sh.refs--; sh.refs <= 0 {
			delete(in.shapes, sh.id)
		}
	}
}

// podAux is what the pods of a namespace share, interned by content: the
// namespace, the family of the first address, container ports (shared by
// the pods of a workload), addresses after the first (dual-stack) and
// Globalnet egress IPs.
type podAux struct {
	ns     *namespaceState // cluster and namespace names
	ports  []Port
	more   []netip.Addr
	egress []netip.Prefix // parseAddrs(EgressIPs)
	key    string
	refs   int32
	// family of the pod's first address (podEntry.ip): 4, 6, or 0 when
	// the pod is not eligible.
	family uint8
	// notReady: the pod is no ready endpoint (Pod.NotReady).
	notReady bool
}

// podFlags are the small per-pod facts interned in podAux.
type podFlags struct {
	family   uint8
	notReady bool
}

func appendAuxKey(b []byte, nsID uint64, f podFlags, ports []Port, more []netip.Addr, egress []netip.Prefix) []byte {
	b = binary.BigEndian.AppendUint64(b, nsID)
	b = append(b, f.family)
	if f.notReady {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	for _, p := range ports {
		b = append(b, p.Name...)
		b = append(b, 0)
		b = strconv.AppendInt(b, int64(p.Port), 10)
		b = append(b, 0)
		b = append(b, p.Protocol...)
		b = append(b, 0)
	}
	b = append(b, 1)
	for _, a := range more {
		b = a.AppendTo(b)
		b = append(b, 0)
	}
	b = append(b, 1)
	for _, p := range egress {
		b = p.AppendTo(b)
		b = append(b, 0)
	}
	return b
}

func (in *interner) podAux(ns *namespaceState, f podFlags, ports []Port, more []netip.Addr, egress []netip.Prefix) *podAux {
	in.buf = appendAuxKey(in.buf[:0], ns.id, f, ports, more, egress)
	if a := in.aux[string(in.buf)]; a != nil {
		a.refs++
		return a
	}
	k := string(in.buf)
	a := &podAux{ns: ns, family: f.family, notReady: f.notReady, ports: slices.Clone(ports), more: slices.Clone(more), egress: slices.Clone(egress), key: k, refs: 1}
	in.aux[k] = a
	return a
}

func (in *interner) releaseAux(a *podAux) {
	if a == nil {
		return
	}
	if a.refs--; a.refs <= 0 {
		delete(in.aux, a.key)
	}
}

// podEntry is one pod as the translator needs it: 48 bytes plus shared,
// interned parts.
type podEntry struct {
	name   string
	labels *labelSet
	aux    *podAux // namespace, address family, ports, further addresses
	// ip is the pod's first valid IP (unmapped, no zone; an IPv4 address
	// in its first 4 bytes), set only when the pod is eligible
	// (Pod.Eligible and a valid IP; aux.family says which): ineligible
	// pods are never rendered, so their addresses are not kept.
	ip [16]byte
}

// ns is the pod's namespace.
func (e *podEntry) ns() *namespaceState { return e.aux.ns }

// eligible reports whether the pod can be a peer.
func (e *podEntry) eligible() bool { return e.aux.family != 0 }

// ready reports whether the pod's Ready condition is True (or unknown:
// older writers do not say), i.e. whether kube-proxy sends it traffic.
func (e *podEntry) ready() bool { return !e.aux.notReady }

// addr is the pod's first address (invalid for an ineligible pod).
func (e *podEntry) addr() netip.Addr {
	switch e.aux.family {
	case 4:
		return netip.AddrFrom4([4]byte(e.ip[:4]))
	case 6:
		return netip.AddrFrom16(e.ip)
	}
	return netip.Addr{}
}

// setAddr stores the first address and returns its family.
func (e *podEntry) setAddr(a netip.Addr) uint8 {
	if a.Is4() {
		copy(e.ip[:4], a.AsSlice())
		return 4
	}
	e.ip = a.As16()
	return 6
}

// addrs yields the pod's valid IPs in their original order (none for an
// ineligible pod).
func (e *podEntry) addrs() iter.Seq[netip.Addr] {
	return func(yield func(netip.Addr) bool) {
		if !e.eligible() || !yield(e.addr()) {
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
	ns := e.ns()
	return ns.cluster.id + "/" + ns.name + "/" + e.name
}

func comparePodKeys(a, b *podEntry) int {
	if a == b {
		return 0
	}
	return strings.Compare(a.key(), b.key())
}

// podTable holds the pods of one namespace by name.
type podTable struct {
	t ptrTable[podEntry]
}

// podSeed seeds the pod tables' name hash.
var podSeed = maphash.MakeSeed()

func podHash(e *podEntry) uint64 { return maphash.String(podSeed, e.name) }

func (pt *podTable) Len() int { return pt.t.n }

func (pt *podTable) get(name string) *podEntry {
	return pt.t.find(maphash.String(podSeed, name), func(e *podEntry) bool { return e.name == name })
}

// put adds e, replacing the pod of the same name (old, nil if none).
func (pt *podTable) put(e, old *podEntry) {
	if old != nil {
		pt.t.replace(podHash(old), old, e)
		return
	}
	pt.t.insert(podHash(e), e, podHash)
}

func (pt *podTable) remove(e *podEntry) { pt.t.remove(podHash(e), e, podHash) }

// all yields every pod; the table must not change meanwhile.
func (pt *podTable) all() iter.Seq[*podEntry] { return pt.t.all() }

// internedLabelSets is the number of distinct label sets; for tests.
func (inv *Inventory) internedLabelSets() int { return inv.intern.sets.Len() }

package enforce

import (
	"hash/maphash"
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
//     included) share one set. Label keys are interned too. A labelSet
//     implements labels.Labels, so selector matching still goes through
//     apimachinery's labels.Selector.
//   - portList: a pod's container ports, interned by content.
//   - addresses are parsed once into netip.Addr / netip.Prefix.
//   - the cluster and namespace names live once, in the namespaceState the
//     pod points to.
//
// Posting lists by label (namespaceState.index) are kept only for the
// label keys that some policy's pod selector can use (Inventory.indexKeys):
// no index is maintained that nothing reads.
//
// Interning is reference counted: a set or list no pod uses any more is
// forgotten, so churn (new pod-template-hashes on every rollout) does not
// grow the tables.

// labelPair is one label.
type labelPair struct{ key, val string }

// labelSet is an interned, immutable label set, sorted by key.
type labelSet struct {
	pairs []labelPair
	hash  uint64
	refs  int32
	next  *labelSet // same-hash chain
}

// emptyLabels is shared by every pod without labels; it is never released.
var emptyLabels = &labelSet{}

var _ labels.Labels = (*labelSet)(nil)

func (s *labelSet) find(key string) int {
	if len(s.pairs) <= 8 {
		for i := range s.pairs {
			if s.pairs[i].key == key {
				return i
			}
		}
		return -1
	}
	i, ok := slices.BinarySearchFunc(s.pairs, key, func(p labelPair, k string) int { return strings.Compare(p.key, k) })
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
		return s.pairs[i].val
	}
	return ""
}

// String renders the set like labels.Set (sorted key=value, comma
// separated); used only in log and error messages.
func (s *labelSet) String() string {
	var b strings.Builder
	for i, p := range s.pairs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(p.key)
		b.WriteByte('=')
		b.WriteString(p.val)
	}
	return b.String()
}

// interner holds the interned label sets, label keys and port lists of
// one inventory.
type interner struct {
	seed  maphash.Seed
	sets  map[uint64]*labelSet
	keys  map[string]*internedString
	ports map[string]*portList
}

type internedString struct {
	s    string
	refs int32
}

func newInterner() *interner {
	return &interner{
		seed:  maphash.MakeSeed(),
		sets:  map[uint64]*labelSet{},
		keys:  map[string]*internedString{},
		ports: map[string]*portList{},
	}
}

func (in *interner) hashPairs(pairs []labelPair) uint64 {
	var h maphash.Hash
	h.SetSeed(in.seed)
	for _, p := range pairs {
		h.WriteString(p.key)
		h.WriteByte(0)
		h.WriteString(p.val)
		h.WriteByte(0)
	}
	return h.Sum64()
}

// labels returns the interned set equal to m, taking a reference.
func (in *interner) labels(m map[string]string) *labelSet {
	if len(m) == 0 {
		return emptyLabels
	}
	pairs := make([]labelPair, 0, len(m))
	for k, v := range m {
		pairs = append(pairs, labelPair{k, v})
	}
	slices.SortFunc(pairs, func(a, b labelPair) int { return strings.Compare(a.key, b.key) })
	h := in.hashPairs(pairs)
	for s := in.sets[h]; s != nil; s = s.next {
		if slices.Equal(s.pairs, pairs) {
			s.refs++
			return s
		}
	}
	for i := range pairs {
		pairs[i].key = in.key(pairs[i].key)
	}
	s := &labelSet{pairs: pairs, hash: h, refs: 1, next: in.sets[h]}
	in.sets[h] = s
	return s
}

func (in *interner) key(k string) string {
	if e := in.keys[k]; e != nil {
		e.refs++
		return e.s
	}
	e := &internedString{s: strings.Clone(k), refs: 1}
	in.keys[e.s] = e
	return e.s
}

func (in *interner) releaseKey(k string) {
	if e := in.keys[k]; e != nil {
		if e.refs--; e.refs <= 0 {
			delete(in.keys, k)
		}
	}
}

// releaseLabels drops a reference to s.
func (in *interner) releaseLabels(s *labelSet) {
	if s == nil || s == emptyLabels {
		return
	}
	if s.refs--; s.refs > 0 {
		return
	}
	head := in.sets[s.hash]
	switch {
	case head == s && s.next == nil:
		delete(in.sets, s.hash)
	case head == s:
		in.sets[s.hash] = s.next
	default:
		for p := head; p != nil; p = p.next {
			if p.next == s {
				p.next = s.next
				break
			}
		}
	}
	for _, p := range s.pairs {
		in.releaseKey(p.key)
	}
}

// portList is an interned, immutable list of container ports.
type portList struct {
	ports []Port
	key   string
	refs  int32
}

var noPorts = &portList{}

func portListKey(ports []Port) string {
	var b strings.Builder
	for _, p := range ports {
		b.WriteString(p.Name)
		b.WriteByte(0)
		b.WriteString(strconv.FormatInt(int64(p.Port), 10))
		b.WriteByte(0)
		b.WriteString(string(p.Protocol))
		b.WriteByte(0)
	}
	return b.String()
}

func (in *interner) portList(ports []Port) *portList {
	if len(ports) == 0 {
		return noPorts
	}
	k := portListKey(ports)
	if pl := in.ports[k]; pl != nil {
		pl.refs++
		return pl
	}
	pl := &portList{ports: slices.Clone(ports), key: k, refs: 1}
	in.ports[k] = pl
	return pl
}

func (in *interner) releasePorts(pl *portList) {
	if pl == nil || pl == noPorts {
		return
	}
	if pl.refs--; pl.refs <= 0 {
		delete(in.ports, pl.key)
	}
}

// podEntry is one pod as the translator needs it.
type podEntry struct {
	ns     *namespaceState // cluster and namespace names
	name   string
	labels *labelSet
	ports  *portList
	addrs  []netip.Addr   // parsed, unmapped, valid IPs
	egress []netip.Prefix // parseAddrs(EgressIPs): Globalnet egress IPs
	// eligible: the pod can be a peer (Pod.Eligible and a valid IP).
	eligible bool
}

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

// labelCount is the number of distinct label sets and of interned label
// keys; for tests and metrics.
func (inv *Inventory) internedLabelSets() (sets int) {
	for _, s := range inv.intern.sets {
		for ; s != nil; s = s.next {
			sets++
		}
	}
	return sets
}

// Package crdt is coastguard's replicated state: a typed, delta-state CRDT in
// which every entry is owned by exactly one origin cluster (single-writer), so
// merging is a per-key maximum over versions and needs no clock anyone must
// trust.
//
// The package is pure: no goroutines, no network, no wall clock (callers pass
// timestamps in), and no client-go. I/O lives in store/ and gossip/.
//
// THIS FILE IS THE CONTRACT shared with store/, gossip/ and the daemon. Change
// it only together with its users.
package crdt

import "fmt"

// Kind is the type of a replicated entry.
type Kind uint8

const (
	// KindCluster is one entry per origin, Name ""; value ClusterValue
	// (labels from ClusterProperty, CIDRs, Globalnet egress).
	KindCluster Kind = 1
	// KindNamespace is a namespace: Name = namespace name; value
	// NamespaceValue.
	KindNamespace Kind = 2
	// KindPod is a pod: Name = "namespace/name"; value PodValue.
	KindPod Kind = 3
	// KindPolicy is a MultiClusterNetworkPolicy created in the origin
	// cluster: Name = "namespace/name"; value PolicyValue.
	KindPolicy Kind = 4
	// KindReport is an enforcement report written by the ENFORCING cluster
	// (the entry's origin) about one MCNP. Name = "<policyOrigin>/<ns>/<name>";
	// value ReportValue.
	KindReport Kind = 5
	// KindService is a Service with a ServiceExport (MCS API): Name =
	// "namespace/name"; value ServiceValue.
	KindService Kind = 6
)

// Each kind is described once, in the registry in kinds.go: its name,
// entry-name shape and value type. String, Valid, name validation and value
// decoding all read that table.

// Version orders the writes of ONE origin. The high 24 bits are the writer
// epoch, the low 40 bits a sequence number within the epoch. A writer that
// restarts or fails over bumps the epoch (persisted in the store and fenced by
// the Lease's leaseTransitions), so versions never regress or repeat even when
// the new writer lost its counter.
type Version uint64

const (
	seqBits = 40
	seqMask = (uint64(1) << seqBits) - 1
	// MaxEpoch is the largest representable epoch.
	MaxEpoch = (uint32(1) << 24) - 1
)

// MakeVersion builds a version from an epoch and a sequence number.
func MakeVersion(epoch uint32, seq uint64) Version {
	return Version(uint64(epoch)<<seqBits | (seq & seqMask))
}

// Epoch returns the writer epoch of v.
func (v Version) Epoch() uint32 { return uint32(uint64(v) >> seqBits) }

// Seq returns the sequence number of v within its epoch.
func (v Version) Seq() uint64 { return uint64(v) & seqMask }

// EpochEnd reports whether v is the last version of its epoch: the shape
// of a takeover's seal (State.SealEpochsBelow retires up to the end of the
// epoch before the writer's).
func (v Version) EpochEnd() bool { return v.Seq() == seqMask }

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Epoch(), v.Seq()) }

// Key identifies an entry. Only Origin may write entries under its name.
type Key struct {
	Origin string
	Kind   Kind
	Name   string
}

func (k Key) String() string { return k.Origin + "/" + k.Kind.String() + "/" + k.Name }

// Entry is one replicated record: the latest write of its key.
type Entry struct {
	Key
	Version Version
	// Deleted marks a tombstone; Value is empty then.
	Deleted bool
	// Value is the msgpack encoding of the kind's value type (values.go).
	Value []byte
	// Stamp is the origin's wall clock (unix nanoseconds) at write time. It is
	// carried ONLY to measure propagation lag in metrics and never orders
	// anything.
	Stamp int64
	// Sig is the origin's signature over EntrySigMessage (nil when the
	// origin does not sign: --insecure-gossip). Stored and relayed as is.
	Sig []byte
}

// OriginDigest summarises what a replica holds of one origin in O(1) space.
type OriginDigest struct {
	// Max is the contiguous watermark: the replica has applied every version
	// of this origin up to and including Max.
	Max Version
	// Hash is an order-independent rolling hash over (kind, name, version,
	// deleted) of every stored entry of this origin. Two replicas with equal
	// Max (and equal GC/Retired) must have equal Hash; a mismatch forces a
	// reset of that origin.
	Hash uint64
	// GC is the origin's tombstone GC watermark: tombstones with
	// Version <= GC have been dropped. A peer whose Max < GC must reset.
	GC Version
	// Retired is the retirement watermark (Retire.UpTo); 0 when not retired.
	Retired Version
	// Top is the highest version stored (> Max only while the replica holds
	// entries received out of order). Hashes are compared only between
	// replicas with Top <= Max.
	Top Version
	// Reset is the progress of an in-flight reset stream the replica is
	// receiving for this origin (0 = none), so a sender can resume it.
	Reset Version
	// GapHash is the part of Hash over entries above Max (received out of
	// order); replicas at equal Max exchange such entries until it agrees.
	GapHash uint64
}

// Digest is the per-origin summary a replica gossips: O(number of clusters).
type Digest map[string]OriginDigest

// Retire removes every entry of Origin with Version <= UpTo, everywhere, for
// ever. The origin signs it; without a signature a replica honours it only
// when its own membership view has seen no live member of Origin for the
// reconnect timeout (that is how a dead cluster is cleaned up).
// Retirements merge by max.
type Retire struct {
	Origin string
	UpTo   Version
	// Sig is the origin's signature over MarkSigMessage(Origin, MarkRetire,
	// UpTo) and Key the key it presents; both nil for a retirement decided
	// by membership (accepted only where membership agrees).
	Sig []byte
	Key []byte
	// Mark is the origin's state mark signed right after its own
	// retirement (a takeover's seal changes its state but neither its head
	// nor its GC watermark); zero when none. See StateMark.
	Mark StateMark
}

// Delta is a contiguous slice of one origin's history as held by the sender:
// it carries every entry of Origin whose version is in (From, To], sorted by
// Version ascending. Any prefix of a sender's stream of deltas is valid to
// apply; a receiver whose Max >= From advances its Max to To.
type Delta struct {
	Origin  string
	From    Version
	To      Version
	Entries []Entry
	// GC and Retired are the sender's watermarks for Origin.
	GC      Version
	Retired Version
	// Reset asks the receiver to drop what it holds of Origin that this
	// stream does not confirm (used when the receiver is behind the GC
	// watermark or hashes disagree at equal Max). See ARCHITECTURE.md.
	Reset bool
	// Final marks the last chunk of a reset stream (To = sender's Max).
	Final bool
	// Gap marks a delta that carries entries the sender received out of
	// order (above its Max): receivers merge them but never advance Max.
	Gap bool
	// Head, HeadSig, GCSig and RetiredSig are the origin's signed
	// watermarks that justify To, GC and Retired (see Proof); Key is the
	// origin public key the sender presents (verified against pins).
	Head       Version
	HeadSig    []byte
	GCSig      []byte
	RetiredSig []byte
	Key        []byte
	// Endorse, when set, proves a key rotation of Origin: the origin's
	// previous public key followed by its signature of
	// EndorseMessage(Origin, Key) (EndorseSize bytes). A receiver that
	// trusts the previous key re-pins Key (docs/SECURITY.md).
	Endorse []byte
	// Mark is the newest state mark of Origin the sender holds (zero when
	// none): the origin's signed digest of its whole state at Mark.Head. A
	// receiver with a verifier moves its watermark only to a mark's head
	// whose digest its own state reproduces (sign.go, advance).
	Mark StateMark
}

// Change is one effect of applying a delta or a local write, as seen by the
// store (which persists it) and the enforcer (which recomputes incrementally).
// Old is nil when the key was absent; New is nil when the key was removed
// from storage entirely (retired, or a tombstone garbage-collected).
type Change struct {
	Key Key
	Old *Entry
	New *Entry
}

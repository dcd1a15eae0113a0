package gossip

import (
	"bytes"
	"errors"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Checkpoint messages (checkpoint.go, docs/GOSSIP.md). Their type numbers
// leave room after the core messages.
const (
	msgCheckpointReq msgType = 20 // a joiner asks an origin's writer for its checkpoint
	msgCheckpoint    msgType = 21 // the writer's signed checkpoint (crdt.Checkpoint)
)

func isCheckpointMsg(t byte) bool {
	return t == byte(msgCheckpointReq) || t == byte(msgCheckpoint)
}

// encodeCheckpointReq: origin.
func encodeCheckpointReq(sender, origin string) []byte {
	b := header(msgCheckpointReq, sender, len(origin)+2)
	b.str(origin)
	return b
}

// encodeCheckpoint: origin, max, gc, segment count, the bounds (uvarints),
// the hashes (32 bytes each), key, endorsement, signature.
func encodeCheckpoint(sender string, cp *crdt.Checkpoint) []byte {
	b := header(msgCheckpoint, sender, len(cp.Origin)+len(cp.Bounds)*42+200)
	b.str(cp.Origin)
	b.uvarint(uint64(cp.Max))
	b.uvarint(uint64(cp.GC))
	b.uvarint(uint64(len(cp.Bounds)))
	for _, v := range cp.Bounds {
		b.uvarint(uint64(v))
	}
	for i := range cp.Hashes {
		b = append(b, cp.Hashes[i][:]...)
	}
	b.bytes(cp.Key)
	b.bytes(cp.Endorse)
	b.bytes(cp.Sig)
	return b
}

func (r *rbuf) checkpointReq() string {
	o := r.str(maxOriginLen)
	if r.err == nil && o == "" {
		r.fail(errors.New("empty origin"))
	}
	return o
}

// checkpoint decodes a checkpoint and checks its shape
// (crdt.ValidateCheckpoint); the signature is the Replica's to check.
func (r *rbuf) checkpoint() *crdt.Checkpoint {
	cp := &crdt.Checkpoint{Origin: r.checkpointReq()}
	cp.Max = crdt.Version(r.uvarint())
	cp.GC = crdt.Version(r.uvarint())
	n := r.count(crdt.MaxCheckpointSegments)
	if r.err != nil {
		return nil
	}
	cp.Bounds = make([]crdt.Version, n)
	for i := range cp.Bounds {
		cp.Bounds[i] = crdt.Version(r.uvarint())
	}
	if r.err == nil && len(r.b) < n*32 {
		r.fail(errShort)
	}
	if r.err != nil {
		return nil
	}
	cp.Hashes = make([][32]byte, n)
	for i := range cp.Hashes {
		copy(cp.Hashes[i][:], r.b[i*32:])
	}
	r.b = r.b[n*32:]
	cp.Key = cloneOrNil(r.raw(crdt.KeySize))
	cp.Endorse = cloneOrNil(r.raw(crdt.EndorseSize))
	cp.Sig = cloneOrNil(r.raw(crdt.SigSize))
	if r.err != nil {
		return nil
	}
	if err := crdt.ValidateCheckpoint(cp); err != nil {
		r.fail(err)
		return nil
	}
	return cp
}

func cloneOrNil(p []byte) []byte {
	if len(p) == 0 {
		return nil
	}
	return bytes.Clone(p)
}

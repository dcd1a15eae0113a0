package gossip

import (
	"crypto/ed25519"
	"errors"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Signed node metadata (issue 29, item 2). Version 1 metadata was
// authenticated only by the shared gossip key, so any key holder could
// gossip an alive message that re-labelled another cluster's member. From
// version 2 the metadata is signed by the cluster's signing key (the key its
// entries are signed with), over the node name and everything in it, and
// every alive message is checked before memberlist takes it (alive.go).
//
// Version 2 keeps version 1's layout and appends an auth trailer, so a
// version 1 reader (which stops after the build version) still decodes it:
//
//	version u8 (2) | flags u8 | cluster: uvarint len + bytes
//	| build version: uvarint len + bytes (always present, maybe empty)
//	| auth u8 (0 none, 1 signed, 2 signed + endorsement)
//	| [key 32 | signature 64 | [endorsement 96]]
//
// The signature covers metaSigMessage: a domain, the node name, the cluster,
// the flags and the build version. It does not cover memberlist's
// incarnation (memberlist re-sends the same metadata in its refutations at
// any incarnation, see alive.go for how incarnations are bounded). The
// endorsement (a rotated key endorsed by its predecessor, crdt.EndorseSize)
// is carried when it fits the 512-byte NodeMeta limit, so that a receiver
// that pinned the old key re-pins from the metadata alone.
const metaVersionSigned = 2

const (
	metaAuthNone     = 0
	metaAuthSigned   = 1
	metaAuthEndorsed = 2
)

const domainMeta = "coastguard/meta/v1\x00"

// metaInfo is decoded node metadata.
type metaInfo struct {
	version byte
	flags   byte
	cluster string
	build   string
	// key, sig and endorse are set for signed metadata (version >= 2,
	// auth != none).
	key, sig, endorse []byte
}

func (m *metaInfo) signed() bool { return len(m.sig) > 0 }

// metaSigMessage is what a cluster's key signs for one node's metadata.
func metaSigMessage(node, cluster string, flags byte, build string) []byte {
	b := make([]byte, 0, len(domainMeta)+len(node)+len(cluster)+len(build)+8)
	b = append(b, domainMeta...)
	b = appendLen16(b, node)
	b = appendLen16(b, cluster)
	b = append(b, flags)
	return appendLen16(b, build)
}

func appendLen16(b []byte, s string) []byte {
	b = append(b, byte(len(s)>>8), byte(len(s)))
	return append(b, s...)
}

// metaFlags returns the flags byte of the writer and leaving flags.
func metaFlags(writer, leaving bool) byte {
	var f byte
	if writer {
		f |= metaWriter
	}
	if leaving {
		f |= metaLeaving
	}
	return f
}

// encodeSignedMeta encodes version 2 metadata for node, signed by sg (and
// carrying sg's endorsement when it has one and it fits limit). With a nil
// sg it is version 1 metadata (encodeMeta).
func encodeSignedMeta(node, cluster, build string, writer, leaving bool, sg crdt.Signer, limit int) []byte {
	if sg == nil {
		return encodeMeta(cluster, build, writer, leaving)
	}
	if len(build) > maxBuildLen {
		build = build[:maxBuildLen]
	}
	flags := metaFlags(writer, leaving)
	b := wbuf{metaVersionSigned, flags}
	b.str(cluster)
	b.str(build)
	sig := sg.Sign(metaSigMessage(node, cluster, flags, build))
	var endorse []byte
	if es, ok := sg.(crdt.EndorsingSigner); ok {
		endorse = es.Endorsement()
	}
	size := len(b) + 1 + crdt.KeySize + crdt.SigSize
	if len(endorse) == crdt.EndorseSize && size+len(endorse) <= limit {
		b = append(b, metaAuthEndorsed)
	} else {
		endorse = nil
		b = append(b, metaAuthSigned)
	}
	b = append(b, sg.PublicKey()...)
	b = append(b, sig...)
	return append(b, endorse...)
}

var errMetaTrailer = errors.New("bad meta auth trailer")

// parseMeta decodes version 1 or 2 metadata.
func parseMeta(p []byte) (metaInfo, error) {
	r := &rbuf{b: p}
	m := metaInfo{version: r.u8(), flags: r.u8()}
	m.cluster = r.str(maxOriginLen)
	if r.err == nil && len(r.b) > 0 {
		m.build = r.str(maxBuildLen)
	}
	if r.err != nil {
		return metaInfo{}, r.err
	}
	if m.version < 1 {
		return metaInfo{}, errors.New("bad meta version")
	}
	if m.version < metaVersionSigned {
		return m, nil
	}
	rest := r.b
	if len(rest) == 0 {
		return metaInfo{}, errMetaTrailer
	}
	auth, rest := rest[0], rest[1:]
	switch auth {
	case metaAuthNone:
		if len(rest) != 0 {
			return metaInfo{}, errMetaTrailer
		}
		return m, nil
	case metaAuthSigned, metaAuthEndorsed:
	default:
		return metaInfo{}, errMetaTrailer
	}
	want := ed25519.PublicKeySize + ed25519.SignatureSize
	if auth == metaAuthEndorsed {
		want += crdt.EndorseSize
	}
	if len(rest) != want {
		return metaInfo{}, errMetaTrailer
	}
	m.key = rest[:ed25519.PublicKeySize]
	m.sig = rest[ed25519.PublicKeySize : ed25519.PublicKeySize+ed25519.SignatureSize]
	if auth == metaAuthEndorsed {
		m.endorse = rest[ed25519.PublicKeySize+ed25519.SignatureSize:]
	}
	return m, nil
}

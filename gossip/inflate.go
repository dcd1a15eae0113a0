package gossip

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/hashicorp/memberlist"
)

// Decompression bombs (issue 29, item 4). memberlist inflates a received
// compressMsg (LZW) up to 40 MiB whether or not this node ever sends one:
// Config.EnableCompression only governs sending. The message type that says
// "compressed" is inside the AES-GCM envelope, so nothing outside
// memberlist can see it without the key. This node holds the key (it is the
// memberlist keyring), so the guard transport opens a copy of every inbound
// packet and stream message itself, before memberlist sees it, and refuses
// one that is, or (packets) contains in a compound, a compressMsg. coastguard
// never sends one, so nothing honest is lost.
//
// The check decrypts what memberlist decrypts again: one AES-GCM pass over
// each packet (~1.4 KB) and each stream message (<= MaxStreamBytes). What
// does not decrypt with any key is passed on unchanged: memberlist refuses
// it and counts it as before (dropped{reason="decrypt"}).
const (
	mlPushPullMsg = 6  // memberlist pushPullMsg
	mlCompoundMsg = 7  // memberlist compoundMsg
	mlUserMsg     = 8  // memberlist userMsg (coastguard's messages)
	mlCompressMsg = 9  // memberlist compressMsg
	mlHasCrcMsg   = 12 // memberlist hasCrcMsg
	gcmNonceSize  = 12
	gcmTagSize    = 16
	// maxCompoundDepth bounds recursion into nested compounds. memberlist
	// itself recurses without bound; deeper nesting is refused too.
	maxCompoundDepth = 4
	// minBodyRate is the slowest an inbound stream may send its body
	// after the header: its whole body must arrive within
	// streamHeaderTimeout + declared length / minBodyRate.
	minBodyRate = 256 << 10
)

var errCompressed = errors.New("memberlist compressMsg refused (decompression is never accepted)")

// frameCheck inspects memberlist messages for compressMsg and for
// membership messages with out-of-bounds incarnations (incarnation.go).
type frameCheck struct {
	// keys returns the keyring, primary first; nil: encryption off.
	keys  func() [][]byte
	label string
	// inc bounds incarnations (nil: not checked).
	inc *incarnations
}

// open decrypts a memberlist envelope ([version] [nonce] [ciphertext+tag])
// with the first key that authenticates it; nil when none does.
func (f frameCheck) open(env, aad []byte) []byte {
	if len(env) < 1+gcmNonceSize+gcmTagSize || env[0] > 1 {
		return nil
	}
	for _, k := range f.keys() {
		block, err := aes.NewCipher(k)
		if err != nil {
			continue
		}
		gcm, err := cipher.NewGCM(block)
		if err != nil {
			continue
		}
		plain, err := gcm.Open(nil, env[1:1+gcmNonceSize], env[1+gcmNonceSize:], aad)
		if err != nil {
			continue
		}
		if env[0] == 0 { // version 0 pads (PKCS#7)
			if p := len(plain); p > 0 && int(plain[p-1]) <= p {
				plain = plain[:p-int(plain[p-1])]
			}
		}
		return plain
	}
	return nil
}

// packet returns errCompressed when the UDP packet buf (as memberlist
// receives it: [label header] envelope) carries a compressMsg, and counts
// the coastguard (user) messages it carries.
func (f frameCheck) packet(buf []byte) (int, error) {
	body, label, err := memberlist.RemoveLabelHeaderFromPacket(buf)
	if err != nil {
		return 0, nil // memberlist refuses and counts it
	}
	if f.keys != nil {
		if body = f.open(body, []byte(label)); body == nil {
			return 0, nil
		}
	}
	if len(body) >= 5 && body[0] == mlHasCrcMsg {
		body = body[5:]
	}
	users := 0
	if f.inc == nil {
		return users, walkCommand(body, 0, &users, nil)
	}
	var claims []incClaim
	if err := walkCommand(body, 0, &users, &claims); err != nil {
		return users, err
	}
	return users, f.inc.admit(claims)
}

// refuseCompressed walks a plaintext memberlist command and its compound
// parts (as memberlist's handleCommand does) for compressMsg.
func refuseCompressed(msg []byte, depth int) error {
	var users int
	return walkCommand(msg, depth, &users, nil)
}

// walkCommand refuses compressMsg in msg and its compound parts, counts
// its user messages and, claims non-nil, collects the incarnations its
// membership messages claim.
func walkCommand(msg []byte, depth int, users *int, claims *[]incClaim) error {
	if len(msg) == 0 {
		return nil
	}
	switch msg[0] {
	case mlCompressMsg:
		return errCompressed
	case mlUserMsg:
		*users++
		return nil
	case mlCompoundMsg:
	default:
		if claims != nil {
			*claims = append(*claims, membershipClaims(msg)...)
		}
		return nil
	}
	if depth >= maxCompoundDepth {
		return fmt.Errorf("%w: compound nested deeper than %d", errCompressed, maxCompoundDepth)
	}
	msg = msg[1:]
	if len(msg) < 1 || len(msg) < 1+2*int(msg[0]) {
		return nil // memberlist refuses a truncated compound
	}
	n := int(msg[0])
	lens, rest := msg[1:1+2*n], msg[1+2*n:]
	for i := range n {
		l := int(binary.BigEndian.Uint16(lens[2*i:]))
		if l > len(rest) {
			return nil // memberlist drops the truncated tail unread
		}
		if err := walkCommand(rest[:l], depth+1, users, claims); err != nil {
			return err
		}
		rest = rest[l:]
	}
	return nil
}

// streamMessage reads one stream message from br after off bytes of label
// header: type, and for an encrypted stream the 4-byte length and the body.
// It returns every byte it read (to replay to memberlist), or errCompressed
// when the message is a compressMsg. label is the stream's label (the
// authenticated data memberlist uses).
func (f frameCheck) streamMessage(br *bufio.Reader, off int, label string) ([]byte, error) {
	frame, _, err := f.streamMessageType(br, off, label)
	return frame, err
}

// streamMessageType is streamMessage that also returns the message's
// (decrypted) type; -1 when it is unknown.
func (f frameCheck) streamMessageType(br *bufio.Reader, off int, label string) ([]byte, int, error) {
	if f.keys == nil {
		b, err := br.Peek(off + 1)
		if err != nil {
			return nil, -1, fmt.Errorf("%w: header: %v", errStreamRefused, err)
		}
		if b[off] == mlCompressMsg {
			return nil, -1, errCompressed
		}
		return nil, int(b[off]), nil // nothing consumed: memberlist reads it from br
	}
	hdr, err := br.Peek(off + 5)
	if err != nil {
		return nil, -1, fmt.Errorf("%w: header: %v", errStreamRefused, err)
	}
	if hdr[off] != mlEncryptMsg {
		return nil, -1, fmt.Errorf("%w: plaintext stream (type %d) while encryption is on", errStreamRefused, hdr[off])
	}
	n := binary.BigEndian.Uint32(hdr[off+1 : off+5])
	if n > MaxStreamBytes {
		return nil, -1, fmt.Errorf("%w: declares %d bytes (limit %d)", errStreamRefused, n, MaxStreamBytes)
	}
	frame := make([]byte, off+5+int(n))
	if _, err := io.ReadFull(br, frame); err != nil {
		return nil, -1, fmt.Errorf("%w: body: %v", errStreamRefused, err)
	}
	aad := append(bytes.Clone(frame[off:off+5]), label...)
	plain := f.open(frame[off+5:], aad)
	if len(plain) == 0 {
		return frame, -1, nil
	}
	if plain[0] == mlCompressMsg {
		return nil, -1, errCompressed
	}
	if plain[0] == mlPushPullMsg {
		if err := f.inc.admit(membershipClaims(plain)); err != nil {
			return nil, -1, err
		}
	}
	return frame, int(plain[0]), nil
}

// checkedConn is a dialed stream (push/pull, TCP ping): the answer memberlist
// reads from it is checked as an inbound stream is. memberlist sets the
// deadlines of outbound streams itself.
type checkedConn struct {
	net.Conn
	f      frameCheck
	onDrop func(reason, from string, err error)
	r      io.Reader
	err    error
}

func (c *checkedConn) Read(p []byte) (int, error) {
	if c.r == nil && c.err == nil {
		br := bufio.NewReader(c.Conn)
		frame, err := c.f.streamMessage(br, 0, c.f.label)
		if err != nil {
			c.err = err
			c.onDrop(frameDropReason(err), remoteIP(c.Conn), err)
			_ = c.Close()
		} else {
			c.r = io.MultiReader(bytes.NewReader(frame), br)
		}
	}
	if c.err != nil {
		return 0, c.err
	}
	return c.r.Read(p)
}

// frameDropReason is the drop reason of a frame check error.
func frameDropReason(err error) string {
	switch {
	case errors.Is(err, errCompressed):
		return dropCompressed
	case errors.Is(err, errIncarnation):
		return dropIncarnation
	case errors.Is(err, errSourceRate):
		return dropRateLimited
	}
	return dropPreAuth
}

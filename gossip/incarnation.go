package gossip

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// Incarnation bounds (issue 29, item 2). memberlist compares incarnations
// as plain uint32: an alive message at 2^32-1 about another node is taken
// by everyone, and the node's refutation wraps to 0 and is ignored, so the
// node stays whatever the attacker says for ever (a dead or suspect at
// 2^32-1 follows). memberlist's Alive delegate does not see incarnations
// (it gets a memberlist.Node, which has none), and suspect and dead
// messages have no delegate at all. So the guard transport, which already
// opens every inbound packet and stream message with the keyring before
// memberlist sees it (inflate.go), also decodes the membership messages in
// it (alive, suspect, dead, and the node states of a push/pull) and refuses
// the whole packet or stream, counted as dropped{reason="incarnation_jump"},
// when one of them carries an incarnation that:
//
//   - is incCeiling (2^31) or more: 2^31 of margin below the wrap, which no
//     honest node reaches (an incarnation grows by one per refutation or
//     metadata update);
//   - is incFirstMax (2^24) or more for a node name this node has not seen
//     yet;
//   - raises a known node above incFirstMax by more than its credit: each
//     node name has incBurst of credit, refilled at incPerSecond, and a
//     raise above incFirstMax spends its size. Below incFirstMax raises
//     are free: no honest node gets near 2^24 (it would take 16 million
//     refutations), so an honest jump, however large after a long
//     partition, is never refused. An attacker can raise a node to 2^24
//     at once, but from there by steps it needs (2^31 - 2^24) /
//     incPerSecond seconds, about 67 years, to reach the ceiling.
//
// The known incarnation is the highest this node let through for the name,
// which is at least memberlist's (memberlist only ever takes incarnations
// that passed here). A refused packet may carry honest piggybacked
// messages: memberlist retransmits broadcasts and pushes its state again,
// so they arrive by another packet. A stream is refused whole (push/pull
// cannot be rewritten without re-encrypting it), which can fail one
// push/pull or join with a node that took an incarnation this node refuses.
//
// Without encryption (tests and the simulator only) streams are not opened
// and are not checked.
const (
	incCeiling   = 1 << 31
	incFirstMax  = 1 << 24
	incBurst     = 4096
	incPerSecond = 1.0
	// maxIncNames bounds the node names tracked; beyond it a name is
	// checked as if seen for the first time (incFirstMax).
	maxIncNames = 16384
	// maxPushPullStates bounds the node states decoded from one push/pull.
	maxPushPullStates = 1 << 16
)

const dropIncarnation = "incarnation_jump"

var errIncarnation = errors.New("membership message refused: incarnation out of bounds")

// memberlist message types that carry an incarnation.
const (
	mlSuspectMsg = 3
	mlAliveMsg   = 4
	mlDeadMsg    = 5
)

// mlIncarnation mirrors the fields of memberlist's alive, suspect and dead
// messages and of a push/pull node state that the check reads (msgpack
// decodes by field name and skips the others).
type mlIncarnation struct {
	Incarnation uint32
	Node        string
	Name        string
}

type mlPushPullHeader struct {
	Nodes        int
	UserStateLen int
	Join         bool
}

// mlHandle decodes memberlist's msgpack (a handle is safe for concurrent
// use once configured).
var mlHandle = &codec.MsgpackHandle{}

// incClaim is one node's incarnation as claimed by a message.
type incClaim struct {
	node string
	inc  uint32
}

// decodeIncClaim decodes a memberlist alive, suspect or dead message body
// (after its type byte).
func decodeIncClaim(body []byte) (incClaim, bool) {
	var m mlIncarnation
	dec := codec.NewDecoder(bytes.NewReader(body), mlHandle)
	if err := dec.Decode(&m); err != nil {
		return incClaim{}, false // memberlist fails to decode it too
	}
	return incClaim{node: m.Node, inc: m.Incarnation}, true
}

// decodePushPullClaims decodes the node states of a push/pull message body
// (after its type byte).
func decodePushPullClaims(body []byte) []incClaim {
	dec := codec.NewDecoder(bytes.NewReader(body), mlHandle)
	var h mlPushPullHeader
	if err := dec.Decode(&h); err != nil {
		return nil
	}
	var out []incClaim
	for i := 0; i < h.Nodes && i < maxPushPullStates; i++ {
		var s mlIncarnation
		if err := dec.Decode(&s); err != nil {
			break
		}
		out = append(out, incClaim{node: s.Name, inc: s.Incarnation})
	}
	return out
}

// incState is what is known of one node name's incarnation.
type incState struct {
	inc    uint32
	credit float64
	at     time.Time
}

// incarnations tracks the highest incarnation let through per node name.
type incarnations struct {
	now func() time.Time

	mu    sync.Mutex
	known map[string]incState
}

func newIncarnations(now func() time.Time) *incarnations {
	if now == nil {
		now = time.Now
	}
	return &incarnations{now: now, known: map[string]incState{}}
}

// admit checks every claim of one packet or stream and, only when all
// pass, records them.
func (t *incarnations) admit(claims []incClaim) error {
	if t == nil || len(claims) == 0 {
		return nil
	}
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	next := make(map[string]incState, len(claims))
	for _, c := range claims {
		st, ok := next[c.node]
		if !ok {
			st, ok = t.known[c.node]
		}
		st, err := step(st, ok, c, now)
		if err != nil {
			return err
		}
		next[c.node] = st
	}
	for name, st := range next {
		if _, ok := t.known[name]; ok || len(t.known) < maxIncNames {
			t.known[name] = st
		}
	}
	return nil
}

// step applies claim c to st (known: st is a real record).
func step(st incState, known bool, c incClaim, now time.Time) (incState, error) {
	if c.inc >= incCeiling {
		return st, fmt.Errorf("%w: node %q at incarnation %d (ceiling %d)", errIncarnation, c.node, c.inc, uint32(incCeiling))
	}
	if !known {
		if c.inc >= incFirstMax {
			return st, fmt.Errorf("%w: node %q first seen at incarnation %d (at most %d)", errIncarnation, c.node, c.inc, incFirstMax-1)
		}
		return incState{inc: c.inc, credit: incBurst, at: now}, nil
	}
	if c.inc <= st.inc {
		return st, nil
	}
	if c.inc < incFirstMax {
		st.inc = c.inc // the honest region: free
		return st, nil
	}
	if el := now.Sub(st.at); el > 0 {
		st.credit = min(incBurst, st.credit+el.Seconds()*incPerSecond)
	}
	st.at = now
	jump := float64(c.inc - max(st.inc, incFirstMax-1))
	if jump > st.credit {
		return st, fmt.Errorf("%w: node %q raised from incarnation %d to %d (credit %.0f)", errIncarnation, c.node, st.inc, c.inc, st.credit)
	}
	st.credit -= jump
	st.inc = c.inc
	return st, nil
}

// membershipClaims returns the incarnation claims of one plaintext
// memberlist command (not a compound: walkCommand splits those).
func membershipClaims(msg []byte) []incClaim {
	if len(msg) == 0 {
		return nil
	}
	switch msg[0] {
	case mlAliveMsg, mlSuspectMsg, mlDeadMsg:
		if c, ok := decodeIncClaim(msg[1:]); ok {
			return []incClaim{c}
		}
	case mlPushPullMsg:
		return decodePushPullClaims(msg[1:])
	}
	return nil
}

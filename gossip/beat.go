package gossip

import (
	"encoding/binary"
	"sync"
	"time"
)

// Origin-signed heartbeats (issue 29, item 2). The reconnect-timeout
// retirement used to rest on memberlist's alive/dead view, which any
// holder of the gossip key can rewrite: a live cluster made to look gone
// was retired everywhere. A cluster now proves it is alive itself: its
// writer signs a heartbeat with the cluster's key every beatEvery (a
// standby does too when it has not heard one of its own cluster for
// 3 × beatEvery, so a cluster without a Lease holder still beats), and
// every node relays a fresh one through memberlist's broadcast queue.
//
// A heartbeat is (origin, counter, signature over both). It carries no
// time: the counter only has to grow. The signer takes
// max(its clock in milliseconds, the highest counter of its own cluster it
// has seen + 1), so successive writers of one cluster keep growing even
// when their clocks differ. A receiver compares a cluster's counter only
// with that cluster's earlier counters, never with its own clock, and
// takes its own receipt time as the time the cluster was last alive. A
// heartbeat whose counter is not above the highest seen is a replay or a
// duplicate and refreshes nothing.
//
// For a cluster that has sent a heartbeat since this node started, the
// retirement rests on heartbeats alone (mayRetire, the retirer): retired
// when none was received for ReconnectTimeout, whatever memberlist says of
// its members; and never while they arrive, whatever memberlist says. For
// a cluster that has never sent one (a daemon of the previous release, or
// a cluster dead since before this node started) the membership view
// decides, as before. With signatures off (--insecure-gossip) there are no
// heartbeats and the membership view decides.
//
// On the wire a heartbeat rides at the end of a heads message with no
// heads (wire.go: decoders ignore trailing bytes), so daemons of the
// previous release take it as an empty announcement.
const domainBeat = "coastguard/beat/v1\x00"

// beatMarker starts the heartbeat trailer of a heads message.
const beatMarker = 0xb7

// beat is one origin-signed heartbeat.
type beat struct {
	origin  string
	counter uint64
	sig     []byte
}

// beatSigMessage is what a cluster's key signs for one heartbeat.
func beatSigMessage(origin string, counter uint64) []byte {
	b := make([]byte, 0, len(domainBeat)+len(origin)+10)
	b = append(b, domainBeat...)
	b = appendLen16(b, origin)
	return binary.BigEndian.AppendUint64(b, counter)
}

// encodeBeat is a heads message with no heads and the heartbeat b.
func encodeBeat(sender string, b beat) []byte {
	w := wbuf(encodeHeads(sender, nil))
	w = append(w, beatMarker)
	w.str(b.origin)
	w.uvarint(b.counter)
	w.bytes(b.sig)
	return w
}

// beatTrailer decodes the optional heartbeat after a heads message's heads.
// Trailing bytes that are not a well-formed heartbeat are ignored, as any
// trailing bytes are (the heads still count).
func (r *rbuf) beatTrailer() *beat {
	if r.err != nil || len(r.b) == 0 || r.b[0] != beatMarker {
		return nil
	}
	t := &rbuf{b: r.b[1:]}
	b := &beat{origin: t.str(maxOriginLen), counter: t.uvarint(), sig: t.raw(64)}
	if t.err != nil || b.origin == "" || len(b.sig) != 64 {
		return nil
	}
	r.b = t.b
	return b
}

// beatEvery is the heartbeat period for a reconnect timeout: a sixteenth
// of it, between 100 ms and a minute.
func beatEvery(reconnectTimeout time.Duration) time.Duration {
	return min(max(reconnectTimeout/16, 100*time.Millisecond), time.Minute)
}

// beats is the heartbeat concern of a Node, under its own lock.
type beats struct {
	self string

	mu      sync.Mutex
	highest map[string]uint64    // origin -> highest counter verified
	fresh   map[string]time.Time // origin -> when its last fresh heartbeat was received
	ownAt   time.Time            // when a heartbeat of the own cluster was last sent or received
}

func newBeats(self string) *beats {
	return &beats{self: self, highest: map[string]uint64{}, fresh: map[string]time.Time{}}
}

// newer reports whether counter is above the highest seen for origin.
func (b *beats) newer(origin string, counter uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return counter > b.highest[origin]
}

// record notes a verified heartbeat received at now; false when it is not
// fresh (a concurrent copy was recorded first).
func (b *beats) record(origin string, counter uint64, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if counter <= b.highest[origin] {
		return false
	}
	b.highest[origin] = counter
	if origin == b.self {
		b.ownAt = now
	} else {
		b.fresh[origin] = now
	}
	return true
}

// next returns the counter of the own cluster's next heartbeat at now and
// records it as sent.
func (b *beats) next(now time.Time) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := uint64(max(now.UnixMilli(), 0))
	if h := b.highest[b.self]; h >= c {
		c = h + 1
	}
	b.highest[b.self] = c
	b.ownAt = now
	return c
}

// ownSince returns when a heartbeat of the own cluster was last sent or
// received.
func (b *beats) ownSince() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ownAt
}

// last returns when origin's last fresh heartbeat was received (ok false:
// none since this node started).
func (b *beats) last(origin string) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.fresh[origin]
	return t, ok
}

// overlay sets LastBeat, and Beating (a heartbeat received within
// staleAfter of now), of every cluster of status that has beaten (a
// cluster known only from heartbeats is not added: it holds nothing).
func (b *beats) overlay(status map[string]ClusterStatus, now time.Time, staleAfter time.Duration) map[string]ClusterStatus {
	b.mu.Lock()
	defer b.mu.Unlock()
	for c, st := range status {
		if t, ok := b.fresh[c]; ok {
			st.LastBeat = t
			st.Beating = now.Sub(t) < staleAfter
			status[c] = st
		}
	}
	return status
}

// beatStale is how long after its last heartbeat a cluster stops counting
// as beating: three periods.
func beatStale(reconnectTimeout time.Duration) time.Duration {
	return 3 * beatEvery(reconnectTimeout)
}

// beatRound sends the own cluster's heartbeat when this node is the writer
// or has not heard one of its cluster for 3 periods.
func (n *Node) beatRound() {
	if n.cfg.Signer == nil || n.quiet.Load() {
		return
	}
	now := n.cfg.Now()
	every := beatEvery(n.cfg.ReconnectTimeout)
	if !n.cfg.IsWriter() && now.Sub(n.beats.ownSince()) < 3*every {
		return
	}
	c := n.beats.next(now)
	b := beat{origin: n.cfg.ClusterID, counter: c, sig: n.cfg.Signer.Sign(beatSigMessage(n.cfg.ClusterID, c))}
	n.broadcastBeat(b)
}

func (n *Node) broadcastBeat(b beat) {
	n.queue.QueueBroadcast(&namedBroadcast{name: "b/" + b.origin, msg: encodeBeat(n.cfg.NodeName, b)})
	n.queue.Prune(maxQueued)
}

// onBeat takes a relayed heartbeat: a fresh one that verifies with the
// origin's trusted key is recorded and relayed on.
func (n *Node) onBeat(b *beat) {
	if n.cfg.Trust == nil || !n.beats.newer(b.origin, b.counter) {
		return
	}
	if err := n.cfg.Trust.Verify(b.origin, nil, beatSigMessage(b.origin, b.counter), b.sig); err != nil {
		n.dropErr(err, "heartbeat refused", "origin", b.origin)
		return
	}
	if n.beats.record(b.origin, b.counter, n.cfg.Now()) {
		if b.origin != n.cfg.ClusterID {
			n.m.beats.Inc()
		}
		n.broadcastBeat(*b)
	}
}

package gossip

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/store"
)

// The e2e rogue (issue 29, "Show"): this package's test binary doubles as
// a key holder's gossip member that the e2e scenario
// TestScenarioRogueFourthCluster runs against real coastguardd processes.
// It is an honest member of its own cluster (the shared gossip key, its
// own signing key) that keeps every signed entry it ever received and, on
// request over a loopback HTTP control port, bends the stream with them:
// skip, resurrect, forged alive and dead. With COASTGUARD_ROGUE_AGENT unset
// the binary runs the package's tests as usual.
const rogueAgentEnv = "COASTGUARD_ROGUE_AGENT"

func TestMain(m *testing.M) {
	if os.Getenv(rogueAgentEnv) != "" {
		if err := runRogueAgent(); err != nil {
			fmt.Fprintln(os.Stderr, "rogue agent:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// rogue is the agent's state: its node, its gossip key and every version of
// every entry it has seen.
type rogue struct {
	node   *Node
	rep    *store.Replica
	key    []byte
	signer crdt.Signer
	mu     sync.Mutex
	seen   map[crdt.Key][]crdt.Entry
	// frozen origins are neither applied nor served (so the rogue never
	// relays them honestly); what arrives of them is only recorded, with
	// the newest state mark, for crafted deltas.
	frozen map[string]bool
	marks  map[string]crdt.StateMark
}

// rogueReplica is what the rogue's node gossips from: the replica minus
// the frozen origins, and without the checkpoint capabilities (a join is
// served delta by delta, through the filter).
type rogueReplica struct {
	NoCheckpoints
	r *rogue
}

func (x rogueReplica) Digest() crdt.Digest {
	d := x.r.rep.Digest()
	x.r.mu.Lock()
	defer x.r.mu.Unlock()
	for o := range x.r.frozen {
		delete(d, o)
	}
	return d
}

func (x rogueReplica) DeltaSince(d crdt.Digest, n int) []crdt.Delta {
	out := x.r.rep.DeltaSince(d, n)
	x.r.mu.Lock()
	defer x.r.mu.Unlock()
	return slices.DeleteFunc(out, func(d crdt.Delta) bool { return x.r.frozen[d.Origin] })
}

func (x rogueReplica) Apply(ds ...crdt.Delta) ([]crdt.Change, error) {
	x.r.mu.Lock()
	pass := ds[:0:0]
	for _, d := range ds {
		if !x.r.frozen[d.Origin] {
			pass = append(pass, d)
			continue
		}
		for _, e := range d.Entries {
			x.r.seen[e.Key] = append(x.r.seen[e.Key], e)
		}
		if d.Mark.Head > x.r.marks[d.Origin].Head {
			x.r.marks[d.Origin] = d.Mark
		}
	}
	x.r.mu.Unlock()
	return x.r.rep.Apply(pass...)
}

func (x rogueReplica) ApplyRetire(rt crdt.Retire) ([]crdt.Change, error) {
	return x.r.rep.ApplyRetire(rt)
}
func (x rogueReplica) SetSigner(sg crdt.Signer) { x.r.rep.SetSigner(sg) }
func (x rogueReplica) SetVerifier(v crdt.Verifier, a crdt.RetireAuthority) {
	x.r.rep.SetVerifier(v, a)
}
func (x rogueReplica) SetLimits(l crdt.Limits) { x.r.rep.SetLimits(l) }

func runRogueAgent() error {
	env := func(k string) string { return os.Getenv("ROGUE_" + k) }
	keys, err := LoadKeyringFile(env("GOSSIP_KEY_FILE"))
	if err != nil {
		return err
	}
	priv, err := LoadSigningKeyFile(env("SIGNING_KEY_FILE"))
	if err != nil {
		return err
	}
	host, portS, err := net.SplitHostPort(env("BIND"))
	if err != nil {
		return err
	}
	port, err := strconv.Atoi(portS)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	sg := NewSigner(priv)
	tr, err := NewTrust(nil, false, env("CLUSTER"), sg.PublicKey(), nil, log)
	if err != nil {
		return err
	}
	r := &rogue{rep: store.NewMemReplica(env("CLUSTER")), key: keys[0], signer: sg, seen: map[crdt.Key][]crdt.Entry{},
		frozen: map[string]bool{}, marks: map[string]crdt.StateMark{}}
	r.rep.Subscribe(r.record)
	cfg := Config{NodeName: env("NODE"), ClusterID: env("CLUSTER"), BindAddr: host, BindPort: port,
		Keyring: keys, Profile: ProfileLocal, Signer: sg, Trust: tr, Logger: log,
		Seeds: strings.Split(env("SEEDS"), ",")}
	ConfigureReplica(&cfg, rogueReplica{r: r}, crdt.DefaultLimits())
	r.node, err = New(cfg, rogueReplica{r: r})
	if err != nil {
		return err
	}
	defer func() { _ = r.node.Shutdown() }()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /state", r.serveState)
	mux.HandleFunc("POST /skip", r.serveSkip)
	mux.HandleFunc("POST /resurrect", r.serveResurrect)
	mux.HandleFunc("POST /alive", r.serveAlive)
	mux.HandleFunc("POST /freeze", func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.frozen[req.URL.Query().Get("origin")] = req.URL.Query().Get("off") == ""
		r.mu.Unlock()
		fmt.Fprintln(w, "ok")
	})
	log.Info("rogue agent ready", "node", env("NODE"), "cluster", env("CLUSTER"), "control", env("CONTROL"))
	return http.ListenAndServe(env("CONTROL"), mux) //nolint:gosec // a test agent on loopback
}

func (r *rogue) record(chs []crdt.Change) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ch := range chs {
		if ch.New != nil {
			r.seen[ch.Key] = append(r.seen[ch.Key], *ch.New)
		}
	}
}

// rogueState is GET /state?origin=O: what the rogue holds of O.
type rogueState struct {
	Digest  crdt.OriginDigest `json:"digest"`
	Members []string          `json:"members"`
	Seen    map[string]int    `json:"seen"` // name -> versions seen
}

func (r *rogue) serveState(w http.ResponseWriter, req *http.Request) {
	o := req.URL.Query().Get("origin")
	st := rogueState{Digest: r.rep.Digest()[o], Seen: map[string]int{}}
	for _, m := range r.node.ml.Members() {
		st.Members = append(st.Members, m.Name)
	}
	r.mu.Lock()
	for k, es := range r.seen {
		if k.Origin == o {
			st.Seen[k.Name] = len(es)
		}
	}
	r.mu.Unlock()
	_ = json.NewEncoder(w).Encode(st)
}

// relay sends deltas to member as relayed (forwarded) deltas: the path any
// member may use for any origin.
func (r *rogue) relay(member string, ds ...crdt.Delta) error {
	to := r.node.memberNode(member)
	if to == nil {
		return fmt.Errorf("no member %q", member)
	}
	var enc [][]byte
	for _, d := range ds {
		b, err := crdt.EncodeDelta(d)
		if err != nil {
			return err
		}
		enc = append(enc, b)
	}
	return r.node.ml.SendReliable(to, encodeDeltaMsg(msgForward, r.node.Name(), 0, false, enc))
}

// proof is the origin's latest signed state mark as the rogue holds it
// (or, for a frozen origin, received it).
func (r *rogue) proof(origin string) crdt.Proof {
	var p crdt.Proof
	r.rep.View(func(s *crdt.State) { p = s.Proof(origin) })
	r.mu.Lock()
	defer r.mu.Unlock()
	if m := r.marks[origin]; m.Head > p.Mark.Head {
		p.Mark = m
	}
	return p
}

// serveSkip is POST /skip?to=MEMBER&origin=O&from=V: only the newest signed
// entry of O, framed as (V, its version], then an empty delta over the
// range up to the rogue's top: the victim must leave the hole open.
func (r *rogue) serveSkip(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	o := q.Get("origin")
	from, err := strconv.ParseUint(q.Get("from"), 10, 64)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var newest crdt.Entry
	r.mu.Lock()
	for k, es := range r.seen {
		if k.Origin == o && es[len(es)-1].Version > newest.Version {
			newest = es[len(es)-1]
		}
	}
	r.mu.Unlock()
	if newest.Version <= crdt.Version(from) {
		http.Error(w, fmt.Sprintf("nothing of %s above %d", o, from), http.StatusConflict)
		return
	}
	p := r.proof(o)
	skip := crdt.Delta{Origin: o, From: crdt.Version(from), To: newest.Version, Entries: []crdt.Entry{newest}, Mark: p.Mark}
	empty := crdt.Delta{Origin: o, From: crdt.Version(from), To: max(newest.Version, p.Mark.Head)}
	if err := r.relay(q.Get("to"), skip, empty); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	fmt.Fprintf(w, "skip sent: %s (%d, %d] with %s only\n", o, from, newest.Version, newest.Name)
}

// serveResurrect is POST /resurrect?to=MEMBER&origin=O&names=A,B: a reset
// stream of O to its signed head holding only the first (live) version of
// each named key, everything else left out, with O's real state mark.
func (r *rogue) serveResurrect(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	o := q.Get("origin")
	var entries []crdt.Entry
	r.mu.Lock()
	for _, name := range strings.Split(q.Get("names"), ",") {
		for k, es := range r.seen {
			if k.Origin == o && k.Name == name {
				entries = append(entries, es[0])
			}
		}
	}
	r.mu.Unlock()
	if len(entries) == 0 {
		http.Error(w, "no such entries seen", http.StatusConflict)
		return
	}
	slices.SortFunc(entries, func(a, b crdt.Entry) int { return cmp.Compare(a.Version, b.Version) })
	p := r.proof(o)
	d := crdt.Delta{Origin: o, From: 0, To: p.Mark.Head, GC: p.Mark.GC, GCSig: p.GCSig, Reset: true, Final: true,
		Entries: entries, Mark: p.Mark, Key: r.node.cfg.Trust.Key(o)}
	if err := r.relay(q.Get("to"), d); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	fmt.Fprintf(w, "resurrect sent: %s reset to %d with %d entries\n", o, p.Mark.Head, len(entries))
}

// serveAlive is POST /alive?to=MEMBER&node=X: an alive at incarnation
// 2^32-1 re-labelling X as a member of the rogue's cluster (metadata
// validly signed by the rogue's key), X's genuine metadata replayed at the
// same incarnation, and a dead for X at 2^32-1, each by UDP to MEMBER.
func (r *rogue) serveAlive(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	to, x := r.node.memberNode(q.Get("to")), r.node.memberNode(q.Get("node"))
	if to == nil || x == nil {
		http.Error(w, "unknown member", http.StatusConflict)
		return
	}
	const wrap = math.MaxUint32
	relabel := encodeSignedMeta(x.Name, r.node.cfg.ClusterID, "", true, false, r.signer, 512)
	alive := func(meta []byte) mlAlive {
		return mlAlive{Incarnation: wrap, Node: x.Name, Addr: x.Addr.To4(), Port: x.Port, Meta: meta, Vsn: []uint8{1, 5, 2, 0, 0, 0}}
	}
	var errs []error
	for _, msg := range []struct {
		typ  byte
		body any
	}{{mlAliveMsg, alive(relabel)}, {mlAliveMsg, alive(x.Meta)}, {mlDeadMsg, mlDead{Incarnation: wrap, Node: x.Name, From: r.node.Name()}}} {
		p, err := sealPacket(r.key, msg.typ, msg.body)
		if err == nil {
			err = sendPacket(net.JoinHostPort(to.Addr.String(), strconv.Itoa(int(to.Port))), p)
		}
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	fmt.Fprintf(w, "forged alive, replayed alive and dead at %d about %s sent to %s\n", uint32(wrap), x.Name, to.Name)
}

func sendPacket(addr string, p []byte) error {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	_, err = c.Write(p)
	return err
}

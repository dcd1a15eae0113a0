package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/gossip"
	"github.com/coastguard-mcnp/coastguard/store"
)

// trafficSnapshot sums, over a mesh, coastguard messages sent by type,
// coastguard message bytes, and what the transports put on the wire.
type trafficSnapshot struct {
	msgs               map[string]float64
	deltasIn           map[string]float64
	appBytes           float64
	wireBytes, packets int64
}

func snapshot(regs []*prometheus.Registry, nodes []*gossip.Node) (trafficSnapshot, error) {
	s := trafficSnapshot{msgs: map[string]float64{}, deltasIn: map[string]float64{}}
	for _, r := range regs {
		fams, err := r.Gather()
		if err != nil {
			return s, err
		}
		for _, f := range fams {
			for _, m := range f.GetMetric() {
				if f.GetName() == "coastguard_gossip_deltas_total" && hasLabel(m, "dir", "in") {
					s.deltasIn[labelValue(m, "path")] += m.GetCounter().GetValue()
				}
				if !hasLabel(m, "dir", "out") {
					continue
				}
				switch f.GetName() {
				case "coastguard_gossip_messages_total":
					s.msgs[labelValue(m, "type")] += m.GetCounter().GetValue()
				case "coastguard_gossip_bytes_total":
					s.appBytes += m.GetCounter().GetValue()
				}
			}
		}
	}
	for _, n := range nodes {
		sent, _, pk, _ := n.Transport().Stats()
		s.wireBytes += sent
		s.packets += pk
	}
	return s, nil
}

func hasLabel(m *dto.Metric, k, v string) bool { return labelValue(m, k) == v }

func labelValue(m *dto.Metric, k string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == k {
			return l.GetValue()
		}
	}
	return ""
}

func (a trafficSnapshot) minus(b trafficSnapshot) trafficSnapshot {
	out := trafficSnapshot{msgs: map[string]float64{}, deltasIn: map[string]float64{}, appBytes: a.appBytes - b.appBytes, wireBytes: a.wireBytes - b.wireBytes, packets: a.packets - b.packets}
	for k, v := range a.msgs {
		out.msgs[k] = v - b.msgs[k]
	}
	for k, v := range a.deltasIn {
		out.deltasIn[k] = v - b.deltasIn[k]
	}
	return out
}

// runBytesBreakdown explains bytes_per_update_per_node: an instrumented
// mesh (same gossip code and defaults as the daemon) counts, per update per
// node, coastguard messages sent by type, their bytes, and the packets and
// bytes the transport put on the wire (memberlist framing, label and
// AES-GCM included). The idle traffic of an equal window is subtracted.
func runTraffic(ctx context.Context, cfg *config, rec *recorder) error {
	if cfg.quick {
		return runBytesBreakdown(ctx, cfg, rec, 8, 5)
	}
	return runBytesBreakdown(ctx, cfg, rec, 50, 20)
}

// runBytesBreakdown runs the traffic section on an instrumented mesh of n
// clusters with the given number of updates.
func runBytesBreakdown(ctx context.Context, cfg *config, rec *recorder, n, updates int) error {
	dir, err := os.MkdirTemp("", "coastguard-bench-bytes-")
	if err != nil {
		return err
	}
	defer removeScratch(dir)
	m := &bytesMesh{}
	defer m.close()
	for i := 0; i < n; i++ {
		if err := m.join(dir, fmt.Sprintf("b%02d", i)); err != nil {
			return err
		}
	}
	if err := m.waitFormed(n); err != nil {
		return err
	}
	sleepUntil(ctx, time.Now().Add(3*time.Second))
	spacing := 400 * time.Millisecond
	window := time.Duration(updates) * spacing
	s0, err := snapshot(m.regs, m.nodes)
	if err != nil {
		return err
	}
	sleepUntil(ctx, time.Now().Add(window))
	s1, _ := snapshot(m.regs, m.nodes)
	idle := s1.minus(s0)
	payload, err := m.publish(ctx, updates, spacing)
	if err != nil {
		return err
	}
	s2, _ := snapshot(m.regs, m.nodes)
	recordBreakdown(rec, n, updates, payload, s2.minus(s1).minus(idle))
	return nil
}

// bytesMesh is the traffic section's instrumented mesh: per cluster, a
// replica, its gossip node (WAN defaults, fault transport over loopback)
// and the node's metrics registry.
type bytesMesh struct {
	reps  []*store.Replica
	nodes []*gossip.Node
	regs  []*prometheus.Registry
}

// join adds cluster cl, its replica stored in dir, seeded with every node
// already in the mesh.
func (m *bytesMesh) join(dir, cl string) error {
	quiet := slog.New(slog.DiscardHandler)
	key := []byte("0123456789abcdef0123456789abcdef")
	rep, err := store.OpenReplica(filepath.Join(dir, cl+".db"), cl, store.Options{Logger: quiet})
	if err != nil {
		return err
	}
	m.reps = append(m.reps, rep)
	inner, err := gossip.NewLoopbackTransport("127.0.0.1")
	if err != nil {
		return err
	}
	var seeds []string
	for _, nd := range m.nodes {
		seeds = append(seeds, nd.Addr())
	}
	reg := prometheus.NewRegistry()
	nd, err := gossip.New(gossip.Config{NodeName: cl, ClusterID: cl, BindAddr: "127.0.0.1", EphemeralPort: true,
		Keyring: [][]byte{key}, Profile: gossip.ProfileWAN, Seeds: seeds, Logger: quiet, Registerer: reg,
		Transport: gossip.NewFaultTransport(inner)}, rep)
	if err != nil {
		return err
	}
	m.nodes = append(m.nodes, nd)
	m.regs = append(m.regs, reg)
	return nil
}

// close shuts the nodes down, then closes the replicas.
func (m *bytesMesh) close() {
	for _, nd := range m.nodes {
		_ = nd.Shutdown()
	}
	for _, r := range m.reps {
		_ = r.Close()
	}
}

// waitFormed waits up to 60s for every node to see n members alive.
func (m *bytesMesh) waitFormed(n int) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok := true
		for _, nd := range m.nodes {
			if nd.NumAlive() != n {
				ok = false
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("mesh of %d did not form", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// publish writes and publishes updates single-pod updates from the first
// cluster, spacing apart, and returns the encoded size of one update.
func (m *bytesMesh) publish(ctx context.Context, updates int, spacing time.Duration) (int, error) {
	payload := 0
	for u := 0; u < updates; u++ {
		v, err := realisticPodValue(u)
		if err != nil {
			return 0, err
		}
		d, err := m.reps[0].Write(crdt.KindPod, fmt.Sprintf("bench/u-%d", u), v, false)
		if err != nil {
			return 0, err
		}
		if b, err := crdt.EncodeDelta(d); err == nil {
			payload = len(b)
		}
		if err := m.nodes[0].Publish(d); err != nil {
			return 0, err
		}
		sleepUntil(ctx, time.Now().Add(spacing))
	}
	return payload, nil
}

// recordBreakdown records the busy traffic (idle subtracted) per update
// per node: wire and coastguard bytes, packets, messages by type and deltas
// received by path.
func recordBreakdown(rec *recorder, n, updates, payload int, busy trafficSnapshot) {
	div := float64(updates * n)
	types := make([]string, 0, len(busy.msgs))
	for t := range busy.msgs {
		types = append(types, t)
	}
	sort.Strings(types)
	msgs := map[string]any{}
	for _, t := range types {
		msgs[t] = round(busy.msgs[t] / div)
	}
	paths := map[string]any{}
	for p, v := range busy.deltasIn {
		paths[p] = round(v / div)
	}
	wire, app, pk := float64(busy.wireBytes)/div, busy.appBytes/div, float64(busy.packets)/div
	perPacket := 0.0
	if pk > 0 {
		perPacket = (wire - app) / pk
	}
	rec.add("bytes_breakdown_wire_per_update_per_node", wire, "B", map[string]any{
		"n": n, "updates": updates, "payload_b": payload, "app_b": round(app), "packets": round(pk),
		"overhead_per_packet_b": round(perPacket), "coastguard_msgs_by_type": msgs, "deltas_received_by_path": paths,
		"what": "instrumented mesh (store.Replica + gossip.Node, WAN defaults); idle window subtracted"}, "", nil)
}

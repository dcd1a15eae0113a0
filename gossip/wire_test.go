package gossip

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

func sampleDeltas(t testing.TB) []crdt.Delta {
	s := crdt.NewState("c1")
	require.NoError(t, s.SetEpoch(s.MinEpoch()))
	var out []crdt.Delta
	for i := 0; i < 3; i++ {
		v, err := crdt.EncodeValue(&crdt.PodValue{IPs: []string{fmt.Sprintf("10.0.0.%d", i)}})
		require.NoError(t, err)
		d, _, err := s.Write(crdt.KindPod, fmt.Sprintf("ns/p%d", i), v, false, int64(i))
		require.NoError(t, err)
		out = append(out, d)
	}
	return out
}

func sampleMessages(t testing.TB) [][]byte {
	ds := sampleDeltas(t)
	var enc [][]byte
	for _, d := range ds {
		b, err := crdt.EncodeDelta(d)
		require.NoError(t, err)
		enc = append(enc, b)
	}
	dig := crdt.Digest{"c1": {Max: crdt.MakeVersion(1, 3), Hash: 42}, "c2": {Max: 7, GC: 2, Retired: 1}}
	return [][]byte{
		encodeHeads("node-a", []Head{{Origin: "c1", Max: crdt.MakeVersion(1, 3)}, {Origin: "c2", Max: 9}}),
		encodeDeltaMsg(msgPush, "node-a", 0, false, enc),
		encodeSyncData("node-b", 77, 2, true, true, enc[:1]),
		encodeSyncReq("node-c", 5, dig),
		encodeDigestMsg("node-d", true, dig),
		encodeDigestMsg("node-d", false, crdt.Digest{}),
		encodeRetires("node-e", []crdt.Retire{{Origin: "c3", UpTo: crdt.MakeVersion(2, 10)}}),
		encodeDigestSum("node-f", digestSum(dig), false),
	}
}

func TestWireRoundTrip(t *testing.T) {
	msgs := sampleMessages(t)
	heads, err := decodeMessage(msgs[0])
	require.NoError(t, err)
	require.Equal(t, msgHeads, heads.Type)
	require.Equal(t, "node-a", heads.Sender)
	require.Equal(t, []Head{{Origin: "c1", Max: crdt.MakeVersion(1, 3)}, {Origin: "c2", Max: 9}}, heads.Heads)

	push, err := decodeMessage(msgs[1])
	require.NoError(t, err)
	require.Equal(t, sampleDeltas(t), push.Deltas)

	sd, err := decodeMessage(msgs[2])
	require.NoError(t, err)
	require.Equal(t, uint64(77), sd.ID)
	require.True(t, sd.Final)
	require.True(t, sd.More)
	require.Len(t, sd.Deltas, 1)
	require.Equal(t, uint64(3), sd.Seq, "chunk index 2, sent as 3")
	enc, err := crdt.EncodeDelta(sampleDeltas(t)[0])
	require.NoError(t, err)
	legacy, err := decodeMessage(encodeDeltaMsgFlags(msgSyncData, "node-b", 77, false, false, [][]byte{enc}))
	require.NoError(t, err)
	require.Zero(t, legacy.Seq, "a sender without Seq")
	require.Len(t, legacy.Deltas, 1)

	req, err := decodeMessage(msgs[3])
	require.NoError(t, err)
	require.Equal(t, uint64(5), req.ID)
	require.Equal(t, crdt.Digest{"c1": {Max: crdt.MakeVersion(1, 3), Hash: 42}, "c2": {Max: 7, GC: 2, Retired: 1}}, req.Digest)

	dg, err := decodeMessage(msgs[4])
	require.NoError(t, err)
	require.True(t, dg.Reply)

	rt, err := decodeMessage(msgs[6])
	require.NoError(t, err)
	require.Equal(t, []crdt.Retire{{Origin: "c3", UpTo: crdt.MakeVersion(2, 10)}}, rt.Retires)

	sum, err := decodeMessage(msgs[7])
	require.NoError(t, err)
	require.Equal(t, digestSum(crdt.Digest{"c1": {Max: crdt.MakeVersion(1, 3), Hash: 42}, "c2": {Max: 7, GC: 2, Retired: 1}}), sum.Sum)
	require.NotEqual(t, digestSum(crdt.Digest{}), sum.Sum)
	require.False(t, sum.Ask)

	// The ask flag is an optional trailing byte: a sum without it (an
	// older sender) decodes as a plain sum, as above.
	ask, err := decodeMessage(encodeDigestSum("node-g", 99, true))
	require.NoError(t, err)
	require.Equal(t, uint64(99), ask.Sum)
	require.True(t, ask.Ask)

	// Trailing bytes from a newer peer are tolerated.
	ext, err := decodeMessage(append(append([]byte{}, msgs[0]...), 1, 2, 3))
	require.NoError(t, err)
	require.Equal(t, heads.Heads, ext.Heads)

	// Every strict prefix of every message is rejected, never a panic,
	// except the legacy forms: sync data without its trailing Seq (one
	// byte here), retirements without their state mark section (two
	// bytes here: the count and one absent mark).
	for k, m := range msgs {
		for i := 0; i < len(m); i++ {
			if k == 2 && i == len(m)-1 || k == 6 && i == len(m)-2 {
				continue
			}
			if _, err := decodeMessage(m[:i]); err == nil {
				t.Fatalf("prefix %d of %v accepted", i, m[:i])
			}
		}
	}
	_, err = decodeMessage([]byte{byte(msgHeads), 1, 1, 'a', 0xff, 0xff, 0xff, 0xff, 0x0f})
	require.Error(t, err, "lying count must be rejected")
	_, err = decodeMessage(make([]byte, MaxMessageBytes+1))
	require.ErrorIs(t, err, errTooLarge)
	_, err = decodeMessage([]byte{42, 1, 1, 'a'})
	require.ErrorIs(t, err, errBadType)
	_, err = decodeMessage([]byte{byte(msgHeads), 1, 0, 0})
	require.Error(t, err, "empty sender")
}

func TestMetaRoundTrip(t *testing.T) {
	c, v, f, err := decodeMeta(encodeMeta("cluster-a", "", true, false))
	require.NoError(t, err)
	require.Equal(t, "cluster-a", c)
	require.Empty(t, v)
	require.Equal(t, byte(metaWriter), f)
	_, _, f, err = decodeMeta(encodeMeta("x", "", false, true))
	require.NoError(t, err)
	require.Equal(t, byte(metaLeaving), f)
	_, _, _, err = decodeMeta([]byte{1})
	require.Error(t, err)

	// The build version trails the cluster; a version-1 decoder that
	// stops after the cluster still reads the same cluster and flags.
	withBuild := encodeMeta("cluster-a", "v0.2.0", true, false)
	c, v, f, err = decodeMeta(withBuild)
	require.NoError(t, err)
	require.Equal(t, "cluster-a", c)
	require.Equal(t, "v0.2.0", v)
	require.Equal(t, byte(metaWriter), f)
	require.Equal(t, encodeMeta("cluster-a", "", true, false), withBuild[:len(withBuild)-len("v0.2.0")-1])
	_, _, _, err = decodeMeta(append(encodeMeta("c", "", false, false), 200))
	require.Error(t, err, "a truncated build version is an error, not garbage")
}

// Members announce their build version; the skew gauge reports a mixed set.
func TestVersionSkewMetric(t *testing.T) {
	m, err := newMetrics(nil, func() float64 { return 0 })
	require.NoError(t, err)
	m.setVersions(map[string]float64{"v1": 2})
	require.Equal(t, 0.0, testutil.ToFloat64(m.versionSkew))
	require.Equal(t, 2.0, testutil.ToFloat64(m.versions.WithLabelValues("v1")))
	m.setVersions(map[string]float64{"v1": 1, "": 1})
	require.Equal(t, 1.0, testutil.ToFloat64(m.versionSkew))
	require.Equal(t, 1.0, testutil.ToFloat64(m.versions.WithLabelValues("unknown")))
	require.Equal(t, 2, testutil.CollectAndCount(m.versions))
	m.setVersions(map[string]float64{"v2": 3})
	require.Equal(t, 1, testutil.CollectAndCount(m.versions), "versions no longer seen are dropped")
	require.Equal(t, 0.0, testutil.ToFloat64(m.versionSkew))
}

func TestParseKeyring(t *testing.T) {
	k1, k2 := testKey(1), testKey(2)[:16]
	b64 := encodeB64
	keys, err := ParseKeyring([]byte("# rotated 2026\n" + b64(k1) + "\n\n  " + b64(k2) + "  \n"))
	require.NoError(t, err)
	require.Equal(t, [][]byte{k1, k2}, keys)
	for _, bad := range []string{"", "# only comment\n", "not base64!\n", encodeB64([]byte("short")) + "\n",
		b64(k1) + "\n" + b64(k1) + "\n"} {
		_, err := ParseKeyring([]byte(bad))
		require.Error(t, err, "%q", bad)
	}
	p := filepath.Join(t.TempDir(), "keys")
	require.NoError(t, os.WriteFile(p, []byte(b64(k1)+"\n"), 0o600))
	keys, err = LoadKeyringFile(p)
	require.NoError(t, err)
	require.Equal(t, [][]byte{k1}, keys)
	_, err = LoadKeyringFile(filepath.Join(t.TempDir(), "missing"))
	require.Error(t, err)
}

func TestConfigDefaultsAndValidation(t *testing.T) {
	c := Config{NodeName: "n", ClusterID: "c"}
	require.NoError(t, c.setDefaults())
	require.Equal(t, ProfileWAN, c.Profile)
	require.Equal(t, 7946, c.BindPort)
	mc := c.memberlistConfig()
	require.Equal(t, 4, mc.GossipNodes)
	require.Equal(t, "coastguard", mc.Label)
	require.Equal(t, 4, mc.RetransmitMult)
	require.Equal(t, 100*time.Millisecond, mc.GossipInterval)
	for _, bad := range []Config{{ClusterID: "c"}, {NodeName: "n"}, {NodeName: "n", ClusterID: "c", Profile: "moon"},
		{NodeName: "n", ClusterID: "c", Keyring: [][]byte{[]byte("short")}}} {
		require.Error(t, bad.setDefaults())
	}
}

package crdt

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// samePod compares pod values as their readers see them: an empty map or
// slice equals a nil one (PodDecoder's documented difference).
func samePod(t testing.TB, want, got *PodValue) {
	t.Helper()
	norm := func(v PodValue) PodValue {
		if len(v.Labels) == 0 {
			v.Labels = nil
		}
		if len(v.IPs) == 0 {
			v.IPs = nil
		}
		if len(v.Ports) == 0 {
			v.Ports = nil
		}
		if len(v.EgressIPs) == 0 {
			v.EgressIPs = nil
		}
		return v
	}
	require.Equal(t, norm(*want), norm(*got))
}

// checkPodDecoder: whatever the bytes, PodDecoder (reusing one target)
// succeeds exactly when DecodeValue does, with the same value.
func checkPodDecoder(t testing.TB, pd *PodDecoder, reused *PodValue, b []byte) {
	var want PodValue
	werr := DecodeValue(b, &want)
	gerr := pd.Decode(b, reused)
	if werr != nil {
		require.EqualError(t, gerr, werr.Error())
		return
	}
	require.NoError(t, gerr)
	samePod(t, &want, reused)
}

func podSeeds() [][]byte {
	var out [][]byte
	add := func(v any) {
		b, err := msgpack.Marshal(v)
		if err != nil {
			panic(err)
		}
		out = append(out, b)
	}
	enc := func(v *PodValue) {
		b, err := EncodeValue(v)
		if err != nil {
			panic(err)
		}
		out = append(out, b)
	}
	enc(&PodValue{})
	enc(&PodValue{Labels: map[string]string{"app": "web", "pod-template-hash": "abc", "tier": "frontend"},
		IPs: []string{"10.0.0.1", "fd00::1"}, Phase: "Running", Ports: []NamedPort{{Name: "http", Port: 8080}, {Port: 53, Protocol: "UDP"}}})
	enc(&PodValue{HostNetwork: true, EgressIPs: []string{"242.0.0.1"}, Phase: "Succeeded"})
	enc(&PodValue{IPs: []string{"10.0.0.2"}, Phase: "Running", NotReady: true})
	// other forms DecodeValue accepts or rejects
	add(map[string]any{"v": 1, "l": nil, "ip": nil, "po": nil})                         // nil fields
	add(map[string]any{"v": 300, "ph": "x"})                                            // format truncated to uint8
	add(map[string]any{"v": 1, "po": []any{map[string]any{"p": -5, "n": "a", "x": 1}}}) // negative port, unknown key
	add(map[string]any{"v": 1, "po": []any{[]any{"n", 80, "TCP"}}})                     // array-encoded port
	add(map[string]any{"v": 1, "hn": 1})                                                // wrong type
	add(map[string]any{"v": 1, "nr": 1})                                                // wrong type
	add(map[string]any{"v": 1, "nr": true, "ip": []string{"10.0.0.3"}})                 // written by hand
	add(map[string]any{"v": 1, "zz": map[string]any{"a": []int{1, 2}}, "l": map[string]string{"a": ""}})
	add([]any{1, map[string]string{"a": "b"}, []string{"1.2.3.4"}, "Running", false, nil, nil}) // array-encoded struct
	add(map[string]any{"l": map[string]string{"a": "b"}})                                       // no format
	add(map[string]any{"v": 1, "l": map[string]any{"a": 1}})                                    // label value not a string
	add(map[string]any{"v": uint64(1 << 40), "po": []any{map[string]any{"p": uint64(1 << 33)}}})
	add(nil)
	return out
}

func TestPodDecoderMatchesDecodeValue(t *testing.T) {
	var pd PodDecoder
	var reused PodValue
	rng := rand.New(rand.NewPCG(7, 8))
	for _, b := range podSeeds() {
		checkPodDecoder(t, &pd, &reused, b)
		// and every truncation and single-byte mutation of it
		for i := 0; i < len(b); i++ {
			checkPodDecoder(t, &pd, &reused, b[:i])
			m := append([]byte(nil), b...)
			m[i] = byte(rng.IntN(256))
			checkPodDecoder(t, &pd, &reused, m)
		}
	}
}

func FuzzPodDecoder(f *testing.F) {
	for _, b := range podSeeds() {
		f.Add(b)
	}
	var pd PodDecoder
	var reused PodValue
	f.Fuzz(func(t *testing.T, b []byte) { checkPodDecoder(t, &pd, &reused, b) })
}

func BenchmarkDecodePodValue(b *testing.B) {
	v := &PodValue{Labels: map[string]string{"app": "web-12", "pod-template-hash": "0123456789", "tier": "frontend"},
		IPs: []string{"10.244.1.2"}, Phase: "Running", Ports: []NamedPort{{Name: "http", Port: 8080}}}
	enc, err := EncodeValue(v)
	require.NoError(b, err)
	b.Run("DecodeValue", func(b *testing.B) {
		for range b.N {
			var out PodValue
			if err := DecodeValue(enc, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("PodDecoder", func(b *testing.B) {
		var pd PodDecoder
		var out PodValue
		for range b.N {
			if err := pd.Decode(enc, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestNotReadyForwardCompatible: a pod value without the readiness field
// (written by an older peer) reads as ready, the reading that counts the
// pod as a Service backend; a value that has it decodes on both paths,
// and the reused target forgets it on the next pod.
func TestNotReadyForwardCompatible(t *testing.T) {
	old, err := msgpack.Marshal(map[string]any{"v": 1, "ip": []string{"10.0.0.1"}, "ph": "Running"})
	require.NoError(t, err)
	nr, err := EncodeValue(&PodValue{IPs: []string{"10.0.0.2"}, Phase: "Running", NotReady: true})
	require.NoError(t, err)
	var pd PodDecoder
	var v PodValue
	require.NoError(t, pd.Decode(nr, &v))
	require.True(t, v.NotReady)
	require.NoError(t, pd.Decode(old, &v))
	require.False(t, v.NotReady, "an older writer's pod is ready")
	var slow PodValue
	require.NoError(t, DecodeValue(nr, &slow))
	require.True(t, slow.NotReady)
	// and a Service value with the Globalnet and readiness fields reads
	// on a decoder that predates them (unknown keys are skipped)
	sv, err := EncodeValue(&ServiceValue{ClusterIPs: []string{"100.2.0.5"}, GlobalIPs: []string{"242.2.0.9"}, PublishNotReady: true})
	require.NoError(t, err)
	var before struct {
		Format     uint8    `msgpack:"v"`
		ClusterIPs []string `msgpack:"ip,omitempty"`
	}
	require.NoError(t, msgpack.Unmarshal(sv, &before))
	require.Equal(t, []string{"100.2.0.5"}, before.ClusterIPs)
	var back ServiceValue
	require.NoError(t, DecodeValue(sv, &back))
	require.Equal(t, []string{"242.2.0.9"}, back.GlobalIPs)
	require.True(t, back.PublishNotReady)
}

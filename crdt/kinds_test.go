package crdt

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// The registry is dense (entry i is Kind(i+1)), names and value types are
// unique, and every kind's value type round-trips through EncodeValue and
// DecodeKind.
func TestKindRegistry(t *testing.T) {
	specs := Kinds()
	require.Len(t, specs, numKinds)
	names, types := map[string]bool{}, map[reflect.Type]bool{}
	for i, s := range specs {
		require.Equal(t, Kind(i+1), s.Kind, "kinds[%d] must describe Kind(%d): kinds are numbered densely from 1", i, i+1)
		require.True(t, s.Kind.Valid())
		require.NotEmpty(t, s.Name)
		require.Equal(t, s.Name, s.Kind.String())
		require.False(t, names[s.Name], "duplicate kind name %q", s.Name)
		names[s.Name] = true
		require.Contains(t, []NameShape{NameEmpty, NameSimple, NameNamespaced, NameOriginNamespaced}, s.Shape, "kind %s", s.Name)
		require.NotNil(t, s.New, "kind %s has no value constructor", s.Name)
		v := s.New()
		typ := reflect.TypeOf(v)
		require.False(t, types[typ], "kind %s shares value type %v with another kind", s.Name, typ)
		types[typ] = true
		b, err := EncodeValue(v)
		require.NoError(t, err)
		got, err := DecodeKind(s.Kind, b)
		require.NoError(t, err)
		require.IsType(t, v, got)
		require.Equal(t, uint8(ValueFormat), *got.formatTag())
	}
	for _, k := range []Kind{0, Kind(numKinds + 1), 255} {
		require.False(t, k.Valid())
		_, ok := k.Spec()
		require.False(t, ok)
		require.Equal(t, fmt.Sprintf("kind(%d)", uint8(k)), k.String())
		_, err := DecodeKind(k, []byte{0x80})
		require.Error(t, err)
	}
	// The constants the other packages use are the registry's kinds.
	require.Equal(t, []Kind{KindCluster, KindNamespace, KindPod, KindPolicy, KindReport, KindService},
		[]Kind{specs[0].Kind, specs[1].Kind, specs[2].Kind, specs[3].Kind, specs[4].Kind, specs[5].Kind})
}

// validName enforces each kind's declared name shape.
func TestValidNameFollowsShape(t *testing.T) {
	good := map[NameShape]string{NameEmpty: "", NameSimple: "shop", NameNamespaced: "shop/web", NameOriginNamespaced: "eu-1/shop/web"}
	for _, s := range Kinds() {
		for shape, name := range good {
			err := validName(s.Kind, name)
			if shape == s.Shape {
				require.NoError(t, err, "kind %s name %q", s.Name, name)
				continue
			}
			// A simple name may contain slashes; only the other shapes
			// are strict about them.
			if s.Shape == NameSimple && name != "" {
				continue
			}
			require.ErrorIs(t, err, ErrInvalid, "kind %s (shape %d) accepted name %q", s.Name, s.Shape, name)
		}
	}
	require.ErrorIs(t, validName(Kind(numKinds+1), "x"), ErrInvalid)
	require.EqualError(t, validName(KindPod, "a"), `crdt: invalid input: pod name "a" must be namespace/name`)
	require.EqualError(t, validName(KindReport, "a/b"), `crdt: invalid input: report name "a/b" must be origin/namespace/name`)
	require.EqualError(t, validName(KindCluster, "x"), `crdt: invalid input: cluster entry must have an empty name`)
}

func TestStampFormatRefusesForeignTypes(t *testing.T) {
	require.Error(t, StampFormat(&struct{ Format uint8 }{}))
	require.Error(t, StampFormat(PodValue{}), "a value, not a pointer, cannot be stamped")
	_, err := EncodeValue(42)
	require.Error(t, err)
	require.Error(t, DecodeValue([]byte{0x80}, new(int)))
}

// FuzzDecodeKind: no input makes the value decoder of any registered kind
// panic, and whatever decodes re-encodes to bytes that are a fixed point
// (decoding them gives the same value, compared by its canonical
// encoding: empty and absent maps are one value).
func FuzzDecodeKind(f *testing.F) {
	for _, s := range Kinds() {
		b, err := EncodeValue(s.New())
		require.NoError(f, err)
		f.Add(uint8(s.Kind), b)
	}
	f.Add(uint8(KindPod), []byte{0x81, 0xa1, 'v', 0x01})
	f.Add(uint8(KindPod), []byte{0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Add(uint8(KindPod), []byte{0x82, 0xa1, 'v', 0x01, 0xa1, 'l', 0x80}) // empty labels map
	f.Fuzz(func(t *testing.T, k uint8, b []byte) {
		v, err := DecodeKind(Kind(k), b)
		if err != nil {
			return
		}
		again, err := EncodeValue(v)
		require.NoError(t, err)
		w, err := DecodeKind(Kind(k), again)
		require.NoError(t, err)
		require.Equal(t, canonical(t, v), canonical(t, w))
	})
}

func canonical(t *testing.T, v any) []byte {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	require.NoError(t, enc.Encode(v))
	return buf.Bytes()
}

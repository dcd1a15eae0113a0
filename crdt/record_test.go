package crdt

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// A record keeps value and signature in one allocation; both come back
// exactly (nil when absent), for signatures of any size, and appending to
// a returned value never overwrites the signature.
func TestRecordPacksValueAndSig(t *testing.T) {
	big := bytes.Repeat([]byte{7}, bigSig+3)
	for _, tc := range []struct {
		name       string
		value, sig []byte
		deleted    bool
	}{
		{"empty", nil, nil, false},
		{"value", []byte("v1"), nil, false},
		{"sig", nil, []byte("sig"), false},
		{"both", []byte("value"), bytes.Repeat([]byte{1}, 64), false},
		{"tombstone signed", nil, []byte("s"), true},
		{"sig of 64 KiB - 2", []byte("v"), big[:bigSig-1], false},
		{"sig of 64 KiB - 1", []byte("v"), big[:bigSig], false},
		{"big sig", []byte("value"), big, false},
		{"big sig, no value", nil, big, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &Entry{Key: Key{Origin: "a", Kind: KindPod, Name: "ns/p"}, Version: 1, Value: tc.value, Sig: tc.sig, Deleted: tc.deleted}
			r := newRecord(e)
			if len(tc.value) == 0 {
				require.Nil(t, r.value())
			} else {
				require.Equal(t, tc.value, r.value())
			}
			if len(tc.sig) == 0 {
				require.Nil(t, r.sig())
			} else {
				require.Equal(t, tc.sig, r.sig())
			}
			_ = append(r.value(), 0xff, 0xff, 0xff, 0xff, 0xff)
			if len(tc.sig) > 0 {
				require.Equal(t, tc.sig, r.sig())
			}
			got := (&originState{name: "a"}).entry(r)
			require.Equal(t, r.value(), got.Value)
			require.Equal(t, r.sig(), got.Sig)
		})
	}
}

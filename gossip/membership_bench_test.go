package gossip

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// The cost of signed membership (issue 29, item 2):
//   - BenchmarkMetaCheckNew: one alive message with metadata not seen
//     before (an Ed25519 verification);
//   - BenchmarkMetaCheckRepeat: memberlist's repeats (push/pull carries
//     every member's alive each time), remembered per name;
//   - BenchmarkPacketIncarnations: the guard's extra work on a UDP packet
//     carrying one alive message (decrypt, decode, admit).
func BenchmarkMetaCheckNew(b *testing.B) {
	own := NewSigner(signingKey(3))
	c1 := NewSigner(signingKey(1))
	tr, err := NewTrust(nil, false, "c3", own.PublicKey(), nil, testLogger())
	if err != nil {
		b.Fatal(err)
	}
	ma := newMemberAuth(tr, false)
	metas := make([][]byte, 64)
	for i := range metas {
		metas[i] = encodeSignedMeta("n", "c1", "v"+strconv.Itoa(i), i%2 == 0, false, c1, 512)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := ma.check("n", metas[i%len(metas)]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(metas[0])), "meta_bytes")
}

func BenchmarkMetaCheckRepeat(b *testing.B) {
	own := NewSigner(signingKey(3))
	tr, err := NewTrust(nil, false, "c3", own.PublicKey(), nil, testLogger())
	if err != nil {
		b.Fatal(err)
	}
	ma := newMemberAuth(tr, false)
	meta := encodeSignedMeta("n", "c1", "v1", true, false, NewSigner(signingKey(1)), 512)
	if _, err := ma.check("n", meta); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := ma.check("n", meta); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPacketIncarnations(b *testing.B) {
	key := bytes.Repeat([]byte{1}, 32)
	var plain bytes.Buffer
	plain.WriteByte(mlAliveMsg)
	meta := encodeSignedMeta("coastguard-7d9f-x", "cluster-a", "v1.0.0", true, false, NewSigner(signingKey(1)), 512)
	if err := codec.NewEncoder(&plain, &codec.MsgpackHandle{}).Encode(&mlAlive{Incarnation: 7, Node: "coastguard-7d9f-x",
		Addr: []byte{10, 0, 0, 1}, Port: 7946, Meta: meta, Vsn: []uint8{1, 5, 2, 0, 0, 0}}); err != nil {
		b.Fatal(err)
	}
	block, _ := aes.NewCipher(key)
	gcm, _ := cipher.NewGCM(block)
	nonce := make([]byte, 12)
	label := "coastguard"
	pkt := append([]byte{mlHasLabelMsg, byte(len(label))}, label...)
	pkt = append(pkt, 1)
	pkt = append(pkt, nonce...)
	pkt = gcm.Seal(pkt, nonce, plain.Bytes(), []byte(label))
	with := frameCheck{keys: func() [][]byte { return [][]byte{key} }, label: label, inc: newIncarnations(time.Now)}
	without := with
	without.inc = nil
	for _, c := range []struct {
		name string
		f    frameCheck
	}{{"compress_check_only", without}, {"with_incarnations", with}} {
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := c.f.packet(pkt); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(pkt)), "packet_bytes")
		})
	}
}

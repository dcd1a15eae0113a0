package gossip

import (
	"bytes"
	"compress/lzw"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/coastguard-mcnp/coastguard/crdt"
)

// Issue 29, item 4: a key holder sends memberlist compressMsg bombs. Every
// path is tried against a real encrypted loopback node: a UDP packet, the
// same inside a compound, an inbound stream, and the answer to the node's
// own push/pull. Each is refused before memberlist inflates it and counted
// as dropped{reason="compressed"}; the heap does not grow by the bombs'
// inflated size.

const bombInflated = 32 << 20 // under memberlist's 40 MiB limit: fully inflated

// bombCommand is a plaintext memberlist compressMsg that inflates to
// bombInflated zero bytes (as a pushPull stream message would).
func bombCommand(t *testing.T) []byte {
	t.Helper()
	var z bytes.Buffer
	w := lzw.NewWriter(&z, lzw.LSB, 8)
	zeros := make([]byte, 1<<20)
	zeros[0] = 6 // pushPullMsg
	for range bombInflated >> 20 {
		_, err := w.Write(zeros)
		require.NoError(t, err)
		zeros[0] = 0
	}
	require.NoError(t, w.Close())
	// msgpack {"Algo": 0, "Buf": bin32}
	m := []byte{mlCompressMsg, 0x82, 0xa4, 'A', 'l', 'g', 'o', 0x00, 0xa3, 'B', 'u', 'f', 0xc6}
	m = binary.BigEndian.AppendUint32(m, uint32(z.Len()))
	return append(m, z.Bytes()...)
}

// seal is memberlist's encryption (version 1): [1] [nonce] [ciphertext+tag].
func seal(t *testing.T, key, plain, aad []byte) []byte {
	t.Helper()
	block, err := aes.NewCipher(key)
	require.NoError(t, err)
	gcm, err := cipher.NewGCM(block)
	require.NoError(t, err)
	nonce := make([]byte, gcmNonceSize)
	_, err = rand.Read(nonce)
	require.NoError(t, err)
	return gcm.Seal(append([]byte{1}, nonce...), nonce, plain, aad)
}

func labelHeader(label string) []byte {
	return append([]byte{mlHasLabelMsg, byte(len(label))}, label...)
}

// streamMessage is an encrypted stream message: [encryptMsg] [len] envelope.
func bombStream(t *testing.T, key, plain []byte, label string) []byte {
	n := 1 + gcmNonceSize + len(plain) + gcmTagSize
	hdr := binary.BigEndian.AppendUint32([]byte{mlEncryptMsg}, uint32(n))
	return append(hdr, seal(t, key, plain, append(bytes.Clone(hdr), label...))...)
}

func heapAlloc() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

func TestAttackDecompressionBombRefused(t *testing.T) {
	key := bytes.Repeat([]byte{1}, 32)
	keys := [][]byte{key}
	a := startNode(t, "a", "c1", keys, nil)
	b := startNode(t, "b", "c2", keys, nil)
	joinAll(t, a, b)
	const label = "coastguard"
	bomb := bombCommand(t)
	t.Logf("bomb: %d B compressed -> %d MiB inflated", len(bomb), bombInflated>>20)
	before := heapAlloc()

	// 1. UDP packet, and the same as the second part of a compound.
	udp, err := net.Dial("udp", a.Addr())
	require.NoError(t, err)
	defer udp.Close()
	compound := []byte{mlCompoundMsg, 2, 0, 1}
	compound = binary.BigEndian.AppendUint16(compound, uint16(len(bomb)))
	compound = append(append(compound, 0xff), bomb...)
	for _, p := range [][]byte{bomb, compound} {
		_, err = udp.Write(append(labelHeader(label), seal(t, key, p, []byte(label))...))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return dropped(a, dropCompressed) >= 2 }, waitEvent, pollEvery)

	// 2. Inbound stream.
	c, err := net.Dial("tcp", a.Addr())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write(append(labelHeader(label), bombStream(t, key, bomb, label)...))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return dropped(a, dropCompressed) >= 3 }, waitEvent, pollEvery)

	// 3. The answer to a's own push/pull (a joins a rogue listener).
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	go func() {
		rc, err := l.Accept()
		if err != nil {
			return
		}
		defer rc.Close()
		_ = rc.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.CopyN(io.Discard, rc, 64) // the start of a's push/pull
		_, _ = rc.Write(bombStream(t, key, bomb, label))
		_, _ = io.Copy(io.Discard, rc)
	}()
	_, _ = a.Join(l.Addr().String())
	require.Eventually(t, func() bool { return dropped(a, dropCompressed) >= 4 }, waitEvent, pollEvery)

	grew := heapAlloc() - before
	t.Logf("allocated while refusing 4 bombs (%d MiB inflated each): %.1f MiB", bombInflated>>20, float64(grew)/(1<<20))
	require.Less(t, grew, uint64(bombInflated), "a bomb was inflated")

	// The mesh still works, over packets and streams.
	a.write(t, crdt.KindPod, "ns/ok", podValue(t, "10.1.1.1"), false)
	requireConverged(t, waitConverge, a, b)
}

func TestRefuseCompressedNesting(t *testing.T) {
	require.ErrorIs(t, refuseCompressed([]byte{mlCompressMsg}, 0), errCompressed)
	require.NoError(t, refuseCompressed([]byte{4, 1, 2}, 0))
	// compound(compound(compress))
	inner := []byte{mlCompoundMsg, 1, 0, 1, mlCompressMsg}
	outer := append([]byte{mlCompoundMsg, 1, 0, byte(len(inner))}, inner...)
	require.ErrorIs(t, refuseCompressed(outer, 0), errCompressed)
	// truncated compounds are left to memberlist, which reads nothing of them
	require.NoError(t, refuseCompressed([]byte{mlCompoundMsg, 3, 0}, 0))
	require.NoError(t, refuseCompressed([]byte{mlCompoundMsg, 1, 0, 9, mlCompressMsg}, 0))
	// nesting beyond the bound is refused
	deep := []byte{mlCompressMsg}
	for range maxCompoundDepth + 1 {
		deep = append([]byte{mlCompoundMsg, 1, 0, byte(len(deep))}, deep...)
	}
	require.ErrorIs(t, refuseCompressed(deep, 0), errCompressed)
}

package gossip

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func encodeB64(k []byte) string { return base64.StdEncoding.EncodeToString(k) }

// FuzzDecodeMessage covers every coastguard gossip message decoder (and,
// through it, crdt.DecodeDelta/DecodeDigest as embedded).
func FuzzDecodeMessage(f *testing.F) {
	for _, m := range sampleMessages(f) {
		f.Add(m)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMessage(b)
		if err != nil {
			return
		}
		if m.Sender == "" || len(m.Sender) > maxSenderName {
			t.Fatalf("accepted bad sender %q", m.Sender)
		}
		for _, h := range m.Heads {
			if h.Origin == "" {
				t.Fatal("accepted empty origin")
			}
		}
	})
}

func FuzzDecodeMeta(f *testing.F) {
	f.Add(encodeMeta("cluster-a", "", true, false))
	f.Add(encodeMeta("", "", false, true))
	f.Add(encodeMeta("cluster-a", "v1.2.3", true, false))
	f.Add(encodeSignedMeta("n", "cluster-a", "v1.2.3", true, false, NewSigner(signingKey(1)), 512))
	f.Add(encodeSignedMeta("n", "cluster-a", "", false, false,
		NewEndorsedSigner(signingKey(2), Endorse("cluster-a", signingKey(1), pub(signingKey(2)))), 512))
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, err := parseMeta(b); err == nil && m.signed() && (len(m.key) != 32 || len(m.sig) != 64) {
			t.Fatalf("signed meta with a %d-byte key and a %d-byte signature", len(m.key), len(m.sig))
		}
		c, v, _, err := decodeMeta(b)
		if err == nil && len(c) > maxOriginLen {
			t.Fatalf("cluster too long: %d", len(c))
		}
		if err == nil && len(v) > maxBuildLen {
			t.Fatalf("build version too long: %d", len(v))
		}
	})
}

func FuzzParseKeyring(f *testing.F) {
	f.Add([]byte(encodeB64(testKey(1)) + "\n" + encodeB64(testKey(2)[:16]) + "\n"))
	f.Add([]byte("# comment\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		keys, err := ParseKeyring(b)
		if err != nil {
			return
		}
		for _, k := range keys {
			if l := len(k); l != 16 && l != 24 && l != 32 {
				t.Fatalf("bad key length %d", l)
			}
		}
	})
}

// TestWriteFuzzSeedCorpus regenerates gossip/testdata/fuzz/* from the
// sample messages when GOSSIP_WRITE_CORPUS=1.
func TestWriteFuzzSeedCorpus(t *testing.T) {
	if os.Getenv("GOSSIP_WRITE_CORPUS") != "1" {
		t.Skip("set GOSSIP_WRITE_CORPUS=1 to regenerate the checked-in seed corpus")
	}
	write := func(target string, i int, b []byte) {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, m := range sampleMessages(t) {
		write("FuzzDecodeMessage", i, m)
	}
	write("FuzzDecodeMessage", 90, []byte{byte(msgHeads), 1, 1, 'a', 0xff, 0xff, 0xff, 0xff, 0x0f})
	write("FuzzDecodeMessage", 91, []byte{byte(msgSyncData), 1, 1, 'a', 1, 1, 1, 0xff, 0xff, 0x7f})
	write("FuzzDecodeMeta", 0, encodeMeta("cluster-a", "", true, false))
	write("FuzzDecodeMeta", 1, []byte{1, 3, 0xff, 0xff})
	write("FuzzParseKeyring", 0, []byte(encodeB64(testKey(1))+"\n"+encodeB64(testKey(2)[:16])+"\n"))
	write("FuzzParseKeyring", 1, []byte("%%%\n"))
}

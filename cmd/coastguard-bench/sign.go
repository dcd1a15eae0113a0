package main

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"time"

	"github.com/coastguard-mcnp/coastguard/crdt"
	"github.com/coastguard-mcnp/coastguard/gossip"
)

// runSign measures what origin signatures (issue 15, docs/SECURITY.md)
// cost: Ed25519 sign and verify per entry, the wire bytes of one signed
// update against an unsigned one, and a full sync (every chunk encoded,
// decoded and merged by a fresh replica) of N entries, signed and verified
// against unsigned. Everything runs in-process on the real crdt and
// gossip.Trust code; no network.
func runSign(ctx context.Context, cfg *config, rec *recorder) error {
	n := 100_000
	if cfg.quick {
		n = 10_000
	}
	priv := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	sg := gossip.NewSigner(priv)
	params := map[string]any{"entries": n, "value": "realistic pod (3 labels, 1 IP, 1 port)"}

	// writers: one signing, one not, same writes
	plainW, plainDs, plainT, err := signWrite(n, nil)
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	signedW, signedDs, signedT, err := signWrite(n, sg)
	if err != nil {
		return err
	}
	perEntry := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 / float64(n) }
	rec.add("sign_write_us_per_entry_unsigned", perEntry(plainT), "µs", params, "", nil)
	rec.add("sign_write_us_per_entry_signed", perEntry(signedT), "µs", params, "", nil)
	rec.add("sign_sign_us_per_entry", perEntry(signedT-plainT), "µs", params, "(signed - unsigned write; entry signature + state mark)", nil)

	if err := signUpdateBytes(rec, params, plainDs, signedDs); err != nil {
		return err
	}
	if err := signVerify(rec, signedW, priv.Public().(ed25519.PublicKey)); err != nil {
		return err
	}
	return signFullSyncs(ctx, rec, params, plainW, signedW, n)
}

// signWrite writes n realistic pods into a fresh state of origin c1, signed
// by signer (nil: unsigned), and returns it, the deltas of the first 1000
// writes and the time the writes took.
func signWrite(n int, signer crdt.Signer) (*crdt.State, []crdt.Delta, time.Duration, error) {
	w := crdt.NewState("c1")
	if signer != nil {
		w.SetSigner(signer)
	}
	if err := w.SetEpoch(1); err != nil {
		return nil, nil, 0, err
	}
	var ds []crdt.Delta
	start := time.Now()
	for i := 0; i < n; i++ {
		v, err := realisticPodValue(i)
		if err != nil {
			return nil, nil, 0, err
		}
		d, _, err := w.Write(crdt.KindPod, fmt.Sprintf("ns-%d/pod-%d", i%50, i), v, false, int64(i))
		if err != nil {
			return nil, nil, 0, err
		}
		if i < 1000 {
			ds = append(ds, d)
		}
	}
	return w, ds, time.Since(start), nil
}

// avgDeltaBytes is the mean encoded size of the deltas.
func avgDeltaBytes(ds []crdt.Delta) (float64, error) {
	total := 0
	for _, d := range ds {
		b, err := crdt.EncodeDelta(d)
		if err != nil {
			return 0, err
		}
		total += len(b)
	}
	return float64(total) / float64(len(ds)), nil
}

// signUpdateBytes records the wire bytes of one update (a single-pod write
// delta), unsigned and signed, and the part of the overhead that is the
// state mark.
func signUpdateBytes(rec *recorder, params map[string]any, plainDs, signedDs []crdt.Delta) error {
	pb, err := avgDeltaBytes(plainDs)
	if err != nil {
		return err
	}
	sb, err := avgDeltaBytes(signedDs)
	if err != nil {
		return err
	}
	rec.add("sign_update_bytes_unsigned", pb, "B", params, "", nil)
	rec.add("sign_update_bytes_signed", sb, "B", params, "", nil)
	rec.add("sign_update_bytes_overhead", sb-pb, "B", params, "", nil)
	// the part of it that is the state mark (issue 29, item 1)
	unmarked := make([]crdt.Delta, len(signedDs))
	for i, d := range signedDs {
		d.Mark = crdt.StateMark{}
		unmarked[i] = d
	}
	ub, err := avgDeltaBytes(unmarked)
	if err != nil {
		return err
	}
	rec.add("sign_update_bytes_state_mark", sb-ub, "B", params, "(completeness: origin-signed state digest with the head)", nil)
	return nil
}

// signVerify records the verify cost per entry, isolated: up to 2000 of the
// signed state's entry signatures checked against pub.
func signVerify(rec *recorder, signedW *crdt.State, pub ed25519.PublicKey) error {
	msgs := make([][]byte, 0, 2000)
	sigs := make([][]byte, 0, 2000)
	signedW.Range("c1", crdt.KindPod, func(e crdt.Entry) bool {
		msgs = append(msgs, crdt.EntrySigMessage(&e))
		sigs = append(sigs, e.Sig)
		return len(msgs) < cap(msgs)
	})
	start := time.Now()
	for i := range msgs {
		if !ed25519.Verify(pub, msgs[i], sigs[i]) {
			return fmt.Errorf("signature %d does not verify", i)
		}
	}
	rec.add("sign_verify_us_per_entry", float64(time.Since(start).Nanoseconds())/1000/float64(len(msgs)), "µs",
		map[string]any{"entries": len(msgs)}, "", nil)
	return nil
}

// signFullSyncs records a full sync of n entries to a fresh replica,
// unsigned and signed-and-verified: time and bytes.
func signFullSyncs(ctx context.Context, rec *recorder, params map[string]any, plainW, signedW *crdt.State, n int) error {
	pt, pbytes, err := signFullSync(ctx, plainW, false, n)
	if err != nil {
		return err
	}
	st, sbytes, err := signFullSync(ctx, signedW, true, n)
	if err != nil {
		return err
	}
	rec.add("sign_full_sync_ms_unsigned", float64(pt.Microseconds())/1000, "ms", params, "", nil)
	rec.add("sign_full_sync_ms_signed_verified", float64(st.Microseconds())/1000, "ms", params, "", nil)
	rec.add("sign_full_sync_mib_unsigned", float64(pbytes)/(1<<20), "MiB", params, "", nil)
	rec.add("sign_full_sync_mib_signed", float64(sbytes)/(1<<20), "MiB", params, "", nil)
	return nil
}

// signFullSync syncs src's n entries to a fresh replica through the wire
// format (every chunk encoded, decoded and merged; signatures verified when
// verify is set) and returns the time it took and the bytes encoded.
func signFullSync(ctx context.Context, src *crdt.State, verify bool, n int) (time.Duration, int, error) {
	dst := crdt.NewState("c2")
	if verify {
		tr, err := gossip.NewTrust(nil, false, "", nil, nil, slog.New(slog.DiscardHandler))
		if err != nil {
			return 0, 0, err
		}
		dst.SetVerifier(tr, nil)
	}
	bytes := 0
	start := time.Now()
	for {
		ds := src.DeltaSince(dst.Digest(), 1000)
		if len(ds) == 0 {
			break
		}
		for _, d := range ds {
			b, err := crdt.EncodeDelta(d)
			if err != nil {
				return 0, 0, err
			}
			bytes += len(b)
			d, err = crdt.DecodeDelta(b)
			if err != nil {
				return 0, 0, err
			}
			if _, err := dst.Apply(d); err != nil {
				return 0, 0, err
			}
		}
		if ctx.Err() != nil {
			return 0, 0, ctx.Err()
		}
	}
	if got := dst.Len("c1"); got != n {
		return 0, 0, fmt.Errorf("full sync delivered %d of %d entries", got, n)
	}
	return time.Since(start), bytes, nil
}

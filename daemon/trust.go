package daemon

import (
	"fmt"
	"log/slog"

	"github.com/coastguard-mcnp/coastguard/gossip"
	"github.com/coastguard-mcnp/coastguard/store"
)

// trustFor builds the signer and the origin-key policy: strict with a trust
// bundle, else trust-on-first-use pins persisted in the store.
func trustFor(o Options, rep *store.Replica, log *slog.Logger) (*gossip.Signer, *gossip.Trust, error) {
	sg := gossip.NewSigner(o.SigningKey)
	if o.TrustBundle != nil {
		if _, ok := o.TrustBundle[o.ClusterID]; !ok {
			return nil, nil, fmt.Errorf("trust bundle does not list this cluster %q", o.ClusterID)
		}
		t, err := gossip.NewTrust(o.TrustBundle, true, o.ClusterID, sg.PublicKey(), nil, log)
		return sg, t, err
	}
	pins, err := rep.Store().Pins()
	if err != nil {
		return nil, nil, fmt.Errorf("load key pins: %w", err)
	}
	t, err := gossip.NewTrust(pins, false, o.ClusterID, sg.PublicKey(), rep.Store().PutPin, log)
	return sg, t, err
}

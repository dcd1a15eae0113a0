package cli

import (
	"context"
	"fmt"
	"os"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/coastguard-mcnp/coastguard/enforce"
	"github.com/coastguard-mcnp/coastguard/model"
)

// ConsentLabel marks the ConfigMap holding a cluster's consent
// (key ConsentKey), as the Helm chart installs it.
const (
	ConsentLabel = "coastguard.submariner.io/consent"
	ConsentKey   = "consent.yaml"
)

// submarinerNamespace is where the daemons look for Submariner by default;
// it is protected by default.
const submarinerNamespace = "submariner-operator"

// admissions returns each member's admission: the daemon's default guard
// rails and its consent (--consent-file for all, else the cluster's own
// consent ConfigMap, else none).
func (o *Options) admissions(ctx context.Context, ms []*member) (map[string]enforce.Admission, error) {
	guards := enforce.DefaultGuards(o.Namespace, submarinerNamespace)
	out := map[string]enforce.Admission{}
	if o.ConsentFile != "" {
		b, err := os.ReadFile(o.ConsentFile)
		if err != nil {
			return nil, fmt.Errorf("--consent-file: %w", err)
		}
		c, err := enforce.ParseConsent(o.ConsentFile, b)
		if err != nil {
			return nil, err
		}
		for _, m := range ms {
			out[m.ID] = enforce.Admission{Guards: guards, Consent: c}
		}
		return out, nil
	}
	for _, m := range ms {
		c, err := o.clusterConsent(ctx, m)
		if err != nil {
			return nil, err
		}
		out[m.ID] = enforce.Admission{Guards: guards, Consent: c}
	}
	return out, nil
}

// clusterConsent reads m's consent ConfigMap; nil when it has none. A
// consent that cannot be read is a warning (the answer assumes none); one
// that does not parse is an error, as it stops the daemon.
func (o *Options) clusterConsent(ctx context.Context, m *member) (*enforce.Consent, error) {
	l, err := m.Client.CoreV1().ConfigMaps(o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: ConsentLabel + "=true"})
	switch {
	case apierrors.IsForbidden(err):
		o.warnf("%s: cannot read consent ConfigMaps in %s (%v); assuming no consent (use --consent-file)", m.ID, o.Namespace, err)
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("%s: consent ConfigMaps: %w", m.ID, err)
	}
	for _, cm := range l.Items {
		if doc, ok := cm.Data[ConsentKey]; ok {
			return enforce.ParseConsent(fmt.Sprintf("%s: ConfigMap %s/%s", m.ID, cm.Namespace, cm.Name), []byte(doc))
		}
	}
	return nil, nil
}

// admit is what cluster c's outputs (model.Outputs, as its daemon computes
// them) hold for ref under c's admission: its pinned labels apply to every
// clusterSelector evaluated there, and c's own network knowledge decides
// which reported pod IPs are owned; both are reset afterwards.
func (l *live) admit(c string, ref enforce.PolicyRef) enforce.Result {
	a := l.adm[c]
	if a.Consent != nil {
		l.inv.SetPinnedLabels(a.Consent.ClusterLabels)
		defer l.inv.SetPinnedLabels(nil)
	}
	if nets, ok := l.nets[c]; ok {
		prev := l.inv.Networks()
		l.inv.SetNetworks(nets)
		defer l.inv.SetNetworks(prev)
	}
	o := model.NewOutputs(c)
	o.SetGuards(a.Guards)
	o.SetConsent(a.Consent)
	return o.Admit(l.inv, ref)
}

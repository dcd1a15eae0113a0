package cli

import "k8s.io/client-go/tools/clientcmd"

func currentContext(o *Options) (string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.Kubeconfig != "" {
		rules.ExplicitPath = o.Kubeconfig
	}
	raw, err := rules.Load()
	if err != nil {
		return "", err
	}
	return raw.CurrentContext, nil
}

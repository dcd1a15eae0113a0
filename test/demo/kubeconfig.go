package main

import (
	"fmt"
	"sort"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// mergeKubeconfigs merges per-cluster kubeconfig files into one with one
// context per cluster, as KUBECONFIG=a:b:c would, but refuses a cluster,
// user or context name that two files define differently: kubectl would
// silently keep the first, and that cluster's context would then present
// another cluster's credentials.
func mergeKubeconfigs(paths []string) (*clientcmdapi.Config, error) {
	out := clientcmdapi.NewConfig()
	for _, p := range paths {
		cfg, err := clientcmd.LoadFromFile(p)
		if err != nil {
			return nil, err
		}
		if err := mergeInto(out.Clusters, cfg.Clusters, p, "cluster"); err != nil {
			return nil, err
		}
		if err := mergeInto(out.AuthInfos, cfg.AuthInfos, p, "user"); err != nil {
			return nil, err
		}
		if err := mergeInto(out.Contexts, cfg.Contexts, p, "context"); err != nil {
			return nil, err
		}
		if out.CurrentContext == "" {
			out.CurrentContext = cfg.CurrentContext
		}
	}
	return out, nil
}

func mergeInto[T any](dst, src map[string]T, path, what string) error {
	names := make([]string, 0, len(src))
	for n := range src {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if _, dup := dst[n]; dup {
			return fmt.Errorf("%s: %s name %q is defined by an earlier kubeconfig too; merged, one cluster would use the other's", path, what, n)
		}
		dst[n] = src[n]
	}
	return nil
}

// writeMergedKubeconfig writes the merged kubeconfig of the clusters to
// path.
func writeMergedKubeconfig(paths []string, path string) error {
	cfg, err := mergeKubeconfigs(paths)
	if err != nil {
		return err
	}
	return clientcmd.WriteToFile(*cfg, path)
}

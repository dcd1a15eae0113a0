package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// perCluster writes a kubeconfig shaped like the harness's: cluster and
// context named after the cluster, user user.
func perCluster(t *testing.T, dir, cluster, user, token string) string {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[cluster] = &clientcmdapi.Cluster{Server: "https://" + cluster}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[cluster] = &clientcmdapi.Context{Cluster: cluster, AuthInfo: user}
	cfg.CurrentContext = cluster
	p := filepath.Join(dir, cluster+".kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*cfg, p))
	return p
}

func TestMergedKubeconfigOneContextPerCluster(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for _, c := range clusters {
		paths = append(paths, perCluster(t, dir, c, "admin@"+c, "token-"+c))
	}
	merged := filepath.Join(dir, "kubeconfig")
	require.NoError(t, writeMergedKubeconfig(paths, merged))
	cfg, err := clientcmd.LoadFromFile(merged)
	require.NoError(t, err)
	require.Len(t, cfg.Contexts, len(clusters))
	for _, c := range clusters {
		rc, err := clientcmd.NewNonInteractiveClientConfig(*cfg, c, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
		require.NoError(t, err)
		assert.Equal(t, "https://"+c, rc.Host)
		assert.Equal(t, "token-"+c, rc.BearerToken, "each context keeps its own cluster's credentials")
	}
	assert.Equal(t, clusters[0], cfg.CurrentContext)
}

// Files that share a user name (what the demo wrote before: "admin" in
// every file) do not merge: with KUBECONFIG=a:b:c every context would use
// the first file's credentials.
func TestMergedKubeconfigRefusesSharedNames(t *testing.T) {
	dir := t.TempDir()
	a := perCluster(t, dir, "eu-1", "admin", "t1")
	b := perCluster(t, dir, "eu-2", "admin", "t2")
	_, err := mergeKubeconfigs([]string{a, b})
	require.ErrorContains(t, err, `user name "admin" is defined by an earlier kubeconfig too`)
}

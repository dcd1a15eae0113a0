package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Cluster is one simulated cluster: a kube-apiserver (and optionally a
// kube-controller-manager) on the shared etcd, with admin credentials.
type Cluster struct {
	Name  string
	Index int
	Dir   string
	// Kubeconfig is the path of an admin (system:masters) kubeconfig.
	Kubeconfig string
	// Server is the apiserver URL (https://127.0.0.1:port).
	Server string
	// ServiceCIDR is the --service-cluster-ip-range of this cluster.
	ServiceCIDR string
	// PodCIDR is the pod CIDR this simulated cluster's pods take their IPs
	// from by convention (10.<Index+1>.0.0/16). There is no CNI: tests set
	// pod IPs themselves. Daemons learn it through --cluster-cidrs (see
	// Env.ClusterCIDRs), as an operator would configure it.
	PodCIDR string
	// EtcdPrefix is the --etcd-prefix of this cluster.
	EtcdPrefix string
	// GossipIP is the loopback alias this cluster's daemons gossip on.
	GossipIP string
	// GossipGID is the primary group of this cluster's daemons; partitions
	// match it.
	GossipGID uint32

	Config  *rest.Config
	Client  kubernetes.Interface
	Dynamic dynamic.Interface

	APIServer         *Process
	ControllerManager *Process

	env *Env
	pki *clusterPKI
}

func newCluster(env *Env, i int, name string) (*Cluster, error) {
	dir := filepath.Join(env.Dir, "clusters", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	pki, err := newClusterPKI(filepath.Join(dir, "pki"), name)
	if err != nil {
		return nil, err
	}
	ip, err := LoopbackAlias(env.opts.GossipIPBase, i)
	if err != nil {
		return nil, err
	}
	svc := fmt.Sprintf("10.%d.0.0/16", 96+i)
	if i < len(env.opts.ServiceCIDRs) {
		svc = env.opts.ServiceCIDRs[i]
	}
	return &Cluster{
		Name:        name,
		Index:       i,
		Dir:         dir,
		Kubeconfig:  filepath.Join(dir, "kubeconfig"),
		ServiceCIDR: svc,
		PodCIDR:     fmt.Sprintf("10.%d.0.0/16", i+1),
		EtcdPrefix:  "/coastguard-e2e/" + name,
		GossipIP:    ip,
		GossipGID:   env.gidBase + uint32(i),
		env:         env,
		pki:         pki,
	}, nil
}

func (c *Cluster) startAPIServer(ctx context.Context, bin string) error {
	var lastErr error
	for attempt := range 3 {
		port, err := FreePort("127.0.0.1", false)
		if err != nil {
			return err
		}
		c.Server = "https://127.0.0.1:" + strconv.Itoa(port)
		if err := c.writeAdminKubeconfig(); err != nil {
			return err
		}
		args := []string{
			"--etcd-servers=" + c.env.EtcdURL,
			"--etcd-prefix=" + c.EtcdPrefix,
			"--bind-address=" + c.bindAddress(),
			"--advertise-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--tls-cert-file=" + c.pki.serverCert,
			"--tls-private-key-file=" + c.pki.serverKey,
			"--client-ca-file=" + c.pki.caFile,
			"--authorization-mode=RBAC",
			"--service-account-issuer=" + c.pki.tokenIssuer,
			"--service-account-key-file=" + c.pki.saPubFile,
			"--service-account-signing-key-file=" + c.pki.saKeyFile,
			"--service-cluster-ip-range=" + c.ServiceCIDR,
			"--allow-privileged=true",
			"--disable-admission-plugins=ServiceAccount",
			"--profiling=false",
			"--shutdown-delay-duration=0s",
			// The "kubernetes" Service cannot have a loopback endpoint;
			// nothing in a simulated cluster needs it.
			"--endpoint-reconciler-type=none",
		}
		p, err := startProcess(c.env.procSpec("kube-apiserver/"+c.Name, bin, args, "kube-apiserver-"+c.Name+".log"))
		if err != nil {
			return err
		}
		c.APIServer = p
		err = waitReady(ctx, p, 90*time.Second, func(ctx context.Context) error {
			b, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
			if err != nil {
				return err
			}
			if strings.TrimSpace(string(b)) != "ok" {
				return fmt.Errorf("readyz: %s", b)
			}
			return nil
		})
		if err == nil {
			return nil
		}
		lastErr = err
		_ = p.Kill()
		if !errors.Is(err, errExited) || ctx.Err() != nil {
			break
		}
		c.env.opts.Logf("harness: kube-apiserver %s attempt %d failed; retrying with a new port", c.Name, attempt+1)
	}
	return fmt.Errorf("harness: kube-apiserver for %s did not start: %w", c.Name, lastErr)
}

// kubeconfigBytes renders a kubeconfig for the cluster with a client
// certificate. Its cluster and context are named after the cluster and its
// user "<user>@<cluster>", so that the kubeconfigs of several clusters
// merge (KUBECONFIG=a:b:c) without one cluster's credentials shadowing
// another's.
func (c *Cluster) kubeconfigBytes(user string, kp KeyPair) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	authInfo := user + "@" + c.Name
	cfg.Clusters[c.Name] = &clientcmdapi.Cluster{Server: c.Server, CertificateAuthorityData: c.pki.ca.CertPEM}
	cfg.AuthInfos[authInfo] = &clientcmdapi.AuthInfo{ClientCertificateData: kp.CertPEM, ClientKeyData: kp.KeyPEM}
	cfg.Contexts[c.Name] = &clientcmdapi.Context{Cluster: c.Name, AuthInfo: authInfo}
	cfg.CurrentContext = c.Name
	return clientcmd.Write(*cfg)
}

func restConfigFrom(kubeconfig []byte) (*rest.Config, error) {
	rc, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	rc.QPS = 200
	rc.Burst = 400
	rc.Timeout = 30 * time.Second
	return rc, nil
}

func (c *Cluster) writeAdminKubeconfig() error {
	b, err := c.kubeconfigBytes("admin", c.pki.adminCert)
	if err != nil {
		return err
	}
	if err := writeFile(c.Kubeconfig, b, 0o600); err != nil {
		return err
	}
	rc, err := restConfigFrom(b)
	if err != nil {
		return err
	}
	c.Config = rc
	if c.Client, err = kubernetes.NewForConfig(rc); err != nil {
		return err
	}
	if c.Dynamic, err = dynamic.NewForConfig(rc); err != nil {
		return err
	}
	return nil
}

// UserKubeconfig writes a kubeconfig authenticating as user (client
// certificate CN) with groups (O), and returns its path and a rest.Config.
// For a ServiceAccount pass "system:serviceaccount:<ns>:<name>" and the
// groups "system:serviceaccounts", "system:serviceaccounts:<ns>": RBAC then
// grants exactly what the ServiceAccount's bindings allow.
func (c *Cluster) UserKubeconfig(user string, groups ...string) (string, *rest.Config, error) {
	kp, err := c.pki.ca.Issue(CertRequest{CommonName: user, Organization: groups, Client: true, Validity: 7 * 24 * time.Hour})
	if err != nil {
		return "", nil, err
	}
	b, err := c.kubeconfigBytes(user, kp)
	if err != nil {
		return "", nil, err
	}
	safe := strings.NewReplacer(":", "_", "/", "_").Replace(user)
	path := filepath.Join(c.Dir, "kubeconfig-"+safe)
	if err := writeFile(path, b, 0o600); err != nil {
		return "", nil, err
	}
	rc, err := restConfigFrom(b)
	if err != nil {
		return "", nil, err
	}
	return path, rc, nil
}

// ServiceAccountKubeconfig is UserKubeconfig for ServiceAccount ns/name.
func (c *Cluster) ServiceAccountKubeconfig(ns, name string) (string, *rest.Config, error) {
	return c.UserKubeconfig("system:serviceaccount:"+ns+":"+name, "system:serviceaccounts", "system:serviceaccounts:"+ns)
}

func (c *Cluster) startControllerManager(ctx context.Context, bin string) error {
	args := []string{
		"--kubeconfig=" + c.Kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		"--controllers=" + c.controllers(),
		"--service-account-private-key-file=" + c.pki.saKeyFile,
		"--root-ca-file=" + c.pki.caFile,
		"--use-service-account-credentials=false",
		"--concurrent-namespace-syncs=4",
	}
	p, err := startProcess(c.env.procSpec("kube-controller-manager/"+c.Name, bin, args, "kube-controller-manager-"+c.Name+".log"))
	if err != nil {
		return err
	}
	c.ControllerManager = p
	// Ready when the serviceaccount controller has created "default" in the
	// default namespace.
	return waitReady(ctx, p, 60*time.Second, func(ctx context.Context) error {
		_, err := c.Client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}

// Kubectl runs the real kubectl against this cluster (admin credentials) and
// returns its stdout and stderr. err is non-nil when kubectl exits non-zero;
// it includes stderr.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	return c.KubectlInput(ctx, nil, args...)
}

// KubectlInput is Kubectl with stdin (for `apply -f -`).
func (c *Cluster) KubectlInput(ctx context.Context, stdin []byte, args ...string) (stdout, stderr string, err error) {
	return c.KubectlAs(ctx, c.Kubeconfig, stdin, args...)
}

// KubectlAs runs kubectl with another kubeconfig of this cluster.
func (c *Cluster) KubectlAs(ctx context.Context, kubeconfig string, stdin []byte, args ...string) (stdout, stderr string, err error) {
	full := append([]string{"--kubeconfig=" + kubeconfig, "--cache-dir=" + filepath.Join(c.env.Dir, "kubectl-cache")}, args...)
	cmd := exec.CommandContext(ctx, c.env.kubectl, full...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "HOME="+c.Dir)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &errb
	cmd.WaitDelay = 5 * time.Second
	runErr := cmd.Run()
	if runErr != nil {
		runErr = fmt.Errorf("kubectl %s (cluster %s): %w: %s", strings.Join(args, " "), c.Name, runErr, strings.TrimSpace(errb.String()))
	}
	return out.String(), errb.String(), runErr
}

// EnsureNamespace creates a namespace if it does not exist.
func (c *Cluster) EnsureNamespace(ctx context.Context, name string, labels map[string]string) error {
	_, err := c.CreateNamespace(ctx, name, labels)
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// bindAddress is where the apiserver listens: loopback, or every address
// when the dataplane's node agents must reach it from their namespaces
// (through the underlay bridge; clients in this namespace still use
// 127.0.0.1).
func (c *Cluster) bindAddress() string {
	if c.env.dp != nil {
		return "0.0.0.0"
	}
	return "127.0.0.1"
}

// controllers are the kube-controller-manager controllers the harness runs;
// with Services on the dataplane, EndpointSlices too (kube-proxy reads them).
func (c *Cluster) controllers() string {
	list := "namespace-controller,garbage-collector-controller,serviceaccount-controller,serviceaccount-token-controller,clusterrole-aggregation-controller"
	if c.env.opts.Services {
		list += ",endpointslice-controller"
	}
	for _, extra := range c.env.opts.ExtraControllers {
		list += "," + extra
	}
	return list
}
